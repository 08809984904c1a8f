// Command sdkjson is instrumented as the Antithesis Go SDK instruments a program built without
// cgo (CGO_ENABLED=0): such a program cannot load libvoidstar.so, so the SDK appends each
// message as one JSON line to the file ANTITHESIS_SDK_LOCAL_OUTPUT names. It speaks that
// fallback and nothing else of deja's.
//
// A small account: 10 units, five withdrawals of 1 to 4 units drawn at random. The fixed
// variant refuses a withdrawal larger than the balance; with -buggy it does not check, and the
// Always "the balance never goes negative" fails.
package main

import (
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"os"
)

var out *os.File

func emit(m map[string]any) {
	if out == nil {
		return
	}
	line, _ := json.Marshal(m)
	out.Write(append(line, '\n'))
}

type site struct {
	kind, display, message string
	mustHit                bool
	line                   int
}

func (s site) send(hit, cond bool, details map[string]any) {
	emit(map[string]any{"antithesis_assert": map[string]any{
		"hit": hit, "must_hit": s.mustHit, "assert_type": s.kind, "display_type": s.display,
		"message": s.message, "condition": cond, "id": s.message,
		"location": map[string]any{"class": "", "function": "main.main", "file": "guest/go/sdkjson/main.go",
			"begin_line": s.line, "begin_column": 2},
		"details": details,
	}})
}

var (
	never   = site{"always", "Always", "the balance never goes negative", true, 73}
	refused = site{"sometimes", "Sometimes", "a withdrawal is refused", true, 69}
	closes  = site{"reachability", "Reachable", "the ledger closes", true, 76}
)

func main() {
	buggy := flag.Bool("buggy", false, "do not check the balance")
	flag.Parse()
	if path := os.Getenv("ANTITHESIS_SDK_LOCAL_OUTPUT"); path != "" {
		out, _ = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	}
	emit(map[string]any{"antithesis_sdk": map[string]any{"language": map[string]any{"name": "Go", "version": "go"},
		"sdk_version": "0.0.0", "protocol_version": "1.1.0"}})
	for _, s := range []site{never, refused, closes} {
		s.send(false, false, nil)
	}
	emit(map[string]any{"antithesis_setup": map[string]any{"status": "complete", "details": map[string]any{"balance": 10}}})
	balance := 10
	for i := 0; i < 5; i++ {
		b := make([]byte, 1)
		rand.Read(b)
		amount := int(b[0]%4) + 1
		if !*buggy && amount > balance {
			refused.send(true, true, map[string]any{"balance": balance, "amount": amount})
			continue
		}
		balance -= amount
		never.send(true, balance >= 0, map[string]any{"balance": balance, "amount": amount})
	}
	fmt.Printf("balance %d\n", balance)
	closes.send(true, true, nil)
}
