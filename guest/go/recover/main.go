// A Go program that turns faults into panics and recovers them, as Go's runtime does with its
// SIGSEGV and SIGFPE handlers (on a per-thread alternate stack, editing the signal context to
// call runtime.sigpanic). Every line it prints is the same under Linux and under deja.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
)

type node struct {
	next  *node
	value int
}

// deref reads through a nil pointer.
func deref(n *node) int {
	return n.next.value
}

func try(name string, f func()) {
	defer func() {
		r := recover()
		var re runtime.Error
		if err, ok := r.(error); ok && errors.As(err, &re) {
			fmt.Printf("%s: recovered runtime error: %v\n", name, re)
			return
		}
		fmt.Printf("%s: recovered %v\n", name, r)
	}()
	f()
	fmt.Printf("%s: no panic\n", name)
}

func main() {
	var n *node
	try("nil field", func() { _ = deref(n) })
	try("nil map write", func() {
		var m map[string]int
		m["a"] = 1
	})
	zero := len(os.Args) - 1
	try("divide", func() { fmt.Println(10 / zero) })
	try("index", func() {
		s := []int{1, 2, 3}
		fmt.Println(s[zero+5])
	})
	// An address the runtime did not map: a fault with SetPanicOnFault.
	debug.SetPanicOnFault(true)
	try("wild pointer", func() {
		p := (*int)(unsafePointer(0xdead0000))
		fmt.Println(*p)
	})
	// A nil dereference in another goroutine, recovered there.
	done := make(chan string)
	go func() {
		defer func() { done <- fmt.Sprint("goroutine: recovered ", recover()) }()
		_ = deref(n)
	}()
	fmt.Println(<-done)
	fmt.Println("still running")
}
