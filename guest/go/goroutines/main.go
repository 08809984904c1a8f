// Command goroutines is a Go program no part of deja knows about: eight goroutines that sleep on
// timers and append to a slice under a mutex, a TCP echo over loopback, and a file written and
// fsynced. It prints the order in which the goroutines finished, what the echo returned and
// what the file holds.
//
// The Go runtime seeds its scheduler's random state from the TSC (cputicks) at start-up, so a
// run is a pure function of deja's seed only when rdtsc is answered by deja; the order is the
// scheduler's, so different seeds give different orders, as different runs do natively.
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

func main() {
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			time.Sleep(time.Millisecond)
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	fmt.Println("order", order)

	ln, err := net.Listen("tcp", "127.0.0.1:7000")
	if err != nil {
		fmt.Println("listen:", err)
		os.Exit(2)
	}
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		line, _ := bufio.NewReader(c).ReadString('\n')
		c.Write([]byte("echo " + line))
		c.Close()
	}()
	c, err := net.Dial("tcp", "127.0.0.1:7000")
	if err != nil {
		fmt.Println("dial:", err)
		os.Exit(2)
	}
	fmt.Fprintf(c, "hello over loopback\n")
	reply, _ := bufio.NewReader(c).ReadString('\n')
	fmt.Print("reply ", reply)

	dir := os.TempDir()
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	path := dir + "/goroutines.log"
	f, err := os.Create(path)
	if err != nil {
		fmt.Println("create:", err)
		os.Exit(2)
	}
	fmt.Fprintf(f, "order %v\n", order)
	if err := f.Sync(); err != nil {
		fmt.Println("fsync:", err)
		os.Exit(2)
	}
	f.Close()
	data, _ := os.ReadFile(path)
	fmt.Print("file ", string(data))
	fmt.Println("elapsed", time.Since(start).Round(time.Millisecond) > 0)
}

var start = time.Now()
