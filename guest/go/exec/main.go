// A Go program that runs itself again through os/exec and syscall.ForkExec, as Go programs
// start their helpers: Output(), a stdin pipe, an exit code through *exec.ExitError, the
// environment, stderr, a child killed while it waits, a missing program, an extra fd, a
// working directory, a new process group and a new session, a pipeline of two children,
// several children at once and a context that ends one. Go 1.19 starts a child with
// clone(CLONE_VM|CLONE_VFORK) and execve, and waits for it with wait4 (or waitid). Every line
// it prints is the same under Linux and under deja: no pids, no host paths.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
)

// child does what its arguments say and exits.
func child(args []string) {
	switch args[0] {
	case "echo":
		fmt.Println(strings.Join(args[1:], "|"))
	case "upper":
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			os.Exit(2)
		}
		os.Stdout.Write([]byte(strings.ToUpper(string(b))))
	case "exit":
		var n int
		fmt.Sscan(args[1], &n)
		fmt.Printf("exiting with %d\n", n)
		fmt.Fprintf(os.Stderr, "stderr before exit %d\n", n)
		os.Exit(n)
	case "env":
		env := os.Environ()
		sort.Strings(env)
		for _, e := range env {
			fmt.Println(e)
		}
	case "stderr":
		fmt.Fprintln(os.Stdout, "to stdout")
		fmt.Fprintln(os.Stderr, "to stderr")
	case "block":
		io.ReadAll(os.Stdin)
		fmt.Println("stdin closed")
	case "fd3":
		f := os.NewFile(3, "extra")
		fmt.Fprintf(f, "written to fd 3 by the child")
		f.Close()
	case "cwd":
		wd, _ := os.Getwd()
		fmt.Println(wd)
	case "ids":
		pid := os.Getpid()
		sid, _, _ := syscall.RawSyscall(syscall.SYS_GETSID, 0, 0, 0)
		fmt.Printf("group is its pid %v, session is its pid %v, parent is %v\n",
			syscall.Getpgrp() == pid, int(sid) == pid, os.Getenv("DEJA_PARENT") == fmt.Sprint(os.Getppid()))
	case "lines":
		for i := 1; i <= 3; i++ {
			fmt.Printf("line %d of %s\n", i, args[1])
		}
	default:
		fmt.Printf("unknown %q\n", args[0])
		os.Exit(2)
	}
}

func show(what string, err error) {
	if err == nil {
		fmt.Printf("%s: ok\n", what)
		return
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		ws := ee.Sys().(syscall.WaitStatus)
		fmt.Printf("%s: %v (ExitCode %d, Exited %v, Signaled %v", what, ee, ee.ExitCode(), ws.Exited(), ws.Signaled())
		if ws.Signaled() {
			fmt.Printf(", %v", ws.Signal())
		}
		fmt.Println(")")
		return
	}
	fmt.Printf("%s: %v\n", what, err)
}

func main() {
	if len(os.Args) > 2 && os.Args[1] == "child" {
		child(os.Args[2:])
		return
	}
	self := os.Args[0]
	me := func(args ...string) *exec.Cmd { return exec.Command(self, append([]string{"child"}, args...)...) }

	out, err := me("echo", "hello", "two words", "").Output()
	fmt.Printf("Output: %q\n", out)
	show("  its error", err)

	cmd := me("upper")
	cmd.Stdin = strings.NewReader("from a reader\n")
	out, err = cmd.Output()
	fmt.Printf("Stdin from a reader: %q\n", out)
	show("  its error", err)

	cmd = me("upper")
	in, _ := cmd.StdinPipe()
	pipe, _ := cmd.StdoutPipe()
	show("Start with pipes", cmd.Start())
	io.WriteString(in, "through a stdin pipe")
	in.Close()
	b, _ := io.ReadAll(pipe)
	fmt.Printf("  read: %q\n", b)
	show("  Wait", cmd.Wait())
	fmt.Printf("  ProcessState: exited %v, code %d, success %v, same pid %v\n", cmd.ProcessState.Exited(),
		cmd.ProcessState.ExitCode(), cmd.ProcessState.Success(), cmd.ProcessState.Pid() == cmd.Process.Pid)

	for _, code := range []string{"1", "3", "255"} {
		out, err = me("exit", code).Output()
		fmt.Printf("exit %s: output %q\n", code, out)
		show("  its error", err)
	}

	cmd = me("env")
	cmd.Env = []string{"DEJA_GO=1", "TWO=two words", "EMPTY="}
	out, err = cmd.Output()
	fmt.Printf("Env: %q\n", out)
	show("  its error", err)
	cmd = me("env")
	cmd.Env = []string{}
	out, _ = cmd.Output()
	fmt.Printf("an empty Env: %q\n", out)

	out, err = me("stderr").CombinedOutput()
	fmt.Printf("CombinedOutput: %q\n", out)
	show("  its error", err)
	cmd = me("stderr")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, _ = cmd.Output()
	fmt.Printf("stdout %q, stderr %q\n", out, stderr.String())
	cmd = me("exit", "4")
	out, err = cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		fmt.Printf("ExitError's Stderr when Output captured it: %q\n", ee.Stderr)
	}

	// A child that waits on its stdin until killed.
	cmd = me("block")
	in, _ = cmd.StdinPipe()
	show("Start a child that waits", cmd.Start())
	show("  Kill", cmd.Process.Kill())
	show("  Wait", cmd.Wait())
	in.Close()
	cmd = me("block")
	in, _ = cmd.StdinPipe()
	cmd.Start()
	show("  Signal(SIGTERM)", cmd.Process.Signal(syscall.SIGTERM))
	show("  Wait", cmd.Wait())
	show("  Signal after Wait", cmd.Process.Signal(syscall.SIGTERM))
	in.Close()
	cmd = me("block")
	in, _ = cmd.StdinPipe()
	cmd.Start()
	in.Close()
	show("a child whose stdin we close", cmd.Wait())

	ctx, cancel := context.WithCancel(context.Background())
	cmd = exec.CommandContext(ctx, self, "child", "block")
	in, _ = cmd.StdinPipe()
	show("CommandContext Start", cmd.Start())
	cancel()
	show("  Wait after cancel", cmd.Wait())
	in.Close()

	show("a missing program", exec.Command("/deja/no/such/program").Run())
	show("a directory", exec.Command("/tmp").Run())
	os.Setenv("PATH", "/deja/nowhere")
	_, err = exec.LookPath("deja-no-such-program")
	show("LookPath on a PATH without it", err)
	show("Run of a name on that PATH", exec.Command("deja-no-such-program").Run())

	r, w, _ := os.Pipe()
	cmd = me("fd3")
	cmd.ExtraFiles = []*os.File{w}
	show("ExtraFiles", cmd.Start())
	w.Close()
	b, _ = io.ReadAll(r)
	r.Close()
	fmt.Printf("  fd 3 gave: %q\n", b)
	show("  Wait", cmd.Wait())

	cmd = me("cwd")
	cmd.Dir = "/tmp"
	out, err = cmd.Output()
	fmt.Printf("Dir /tmp: %q\n", out)
	show("  its error", err)
	cmd = me("cwd")
	cmd.Dir = "/deja/no/such/directory"
	show("Dir that does not exist", cmd.Run())

	parent := fmt.Sprintf("DEJA_PARENT=%d", os.Getpid())
	cmd = me("ids")
	cmd.Env = []string{parent}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err = cmd.Output()
	fmt.Printf("Setpgid: %s", out)
	show("  its error", err)
	cmd = me("ids")
	cmd.Env = []string{parent}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err = cmd.Output()
	fmt.Printf("Setsid: %s", out)
	show("  its error", err)

	// A pipeline: one child's stdout is the next one's stdin.
	first := me("echo", "down", "the", "pipeline")
	second := me("upper")
	second.Stdin, _ = first.StdoutPipe()
	var got strings.Builder
	second.Stdout = &got
	show("pipeline: second Start", second.Start())
	show("  first Run", first.Run())
	show("  second Wait", second.Wait())
	fmt.Printf("  gave %q\n", got.String())

	// Several children at once, each read line by line.
	var mu sync.Mutex
	var lines []string
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c := me("lines", fmt.Sprint("child ", i))
			p, _ := c.StdoutPipe()
			if err := c.Start(); err != nil {
				fmt.Println("start:", err)
				return
			}
			s := bufio.NewScanner(p)
			for s.Scan() {
				mu.Lock()
				lines = append(lines, s.Text())
				mu.Unlock()
			}
			c.Wait()
		}(i)
	}
	wg.Wait()
	sort.Strings(lines)
	fmt.Printf("four children at once: %d lines, first %q, last %q\n", len(lines), lines[0], lines[len(lines)-1])

	// syscall.ForkExec and Wait4, without os/exec.
	pr, pw, _ := os.Pipe()
	pid, err := syscall.ForkExec(self, []string{"forkexec", "child", "echo", "through", "ForkExec"}, &syscall.ProcAttr{
		Env:   []string{},
		Files: []uintptr{0, pw.Fd(), 2},
	})
	show("syscall.ForkExec", err)
	pw.Close()
	b, _ = io.ReadAll(pr)
	pr.Close()
	fmt.Printf("  it wrote %q\n", b)
	var ws syscall.WaitStatus
	wpid, err := syscall.Wait4(pid, &ws, 0, nil)
	fmt.Printf("  Wait4: the child %v, exited %v, status %d, err %v\n", wpid == pid, ws.Exited(), ws.ExitStatus(), err)
	_, err = syscall.Wait4(pid, &ws, 0, nil)
	show("  Wait4 again", err)
	_, err = syscall.ForkExec("/deja/no/such/program", []string{"x"}, &syscall.ProcAttr{})
	show("syscall.ForkExec of a missing program", err)

	p, err := os.StartProcess(self, []string{"started", "child", "exit", "7"}, &os.ProcAttr{Files: []*os.File{nil, nil, nil}})
	show("os.StartProcess", err)
	st, err := p.Wait()
	fmt.Printf("  Wait: %v, code %d, err %v\n", st, st.ExitCode(), err)
	fmt.Println("done")
}
