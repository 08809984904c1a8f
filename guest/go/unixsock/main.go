// A Go program that serves on Unix-domain sockets the way Go's net package does it (non-
// blocking sockets under the runtime's epoll poller): an echo server on a socket file that
// two clients dial in turn, a datagram exchange between two named sockets, an abstract
// name, and the socket file Go removes when the listener closes. Its output is the same
// natively and under deja.
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

func serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if _, err := c.Write([]byte(strings.ToUpper(line))); err != nil {
			return
		}
	}
}

func check(what string, err error) {
	if err != nil {
		fmt.Printf("%s: %v\n", what, err)
		os.Exit(1)
	}
}

func main() {
	dir, err := os.MkdirTemp("", "go-unix-")
	check("mkdtemp", err)
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "echo.sock")
	l, err := net.Listen("unix", path)
	check("listen", err)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	for client := 0; client < 2; client++ {
		c, err := net.Dial("unix", path)
		check("dial", err)
		r := bufio.NewReader(c)
		for i := 0; i < 3; i++ {
			fmt.Fprintf(c, "client %d line %d\n", client, i)
			line, err := r.ReadString('\n')
			check("read", err)
			fmt.Printf("echo: %s", line)
		}
		c.Close()
	}
	fi, err := os.Stat(path)
	check("stat", err)
	fmt.Println("socket file:", fi.Mode()&os.ModeSocket != 0)

	a, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "a.sock"), Net: "unixgram"})
	check("listen unixgram", err)
	b, err := net.DialUnix("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "b.sock"), Net: "unixgram"},
		a.LocalAddr().(*net.UnixAddr))
	check("dial unixgram", err)
	_, err = b.Write([]byte("one datagram"))
	check("write unixgram", err)
	buf := make([]byte, 64)
	n, from, err := a.ReadFromUnix(buf)
	check("read unixgram", err)
	fmt.Printf("unixgram: %q from %s\n", buf[:n], filepath.Base(from.Name))
	_, err = a.WriteToUnix([]byte("a reply"), from)
	check("reply", err)
	n, err = b.Read(buf)
	check("read reply", err)
	fmt.Printf("reply: %q\n", buf[:n])

	ab, err := net.Listen("unix", "@deja-go-abstract")
	check("abstract", err)
	fmt.Println("abstract:", ab.Addr())
	c, err := net.Dial("unix", "@deja-go-abstract")
	check("dial abstract", err)
	c.Close()
	ab.Close()

	l.Close()
	_, err = os.Stat(path)
	fmt.Println("removed when the listener closed:", os.IsNotExist(err))
	_, err = net.Dial("unix", path)
	fmt.Println("dial after close:", err != nil)
}
