package redistest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER.
const prSetChildSubreaper = 36

func adoptOrphans() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}

// setParentDeath has the kernel kill the process that attr starts when the thread that started it exits
// (see Server.start, which starts it from a thread it keeps).
func setParentDeath(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }

// child is a child process of this one, as /proc tells it.
type child struct {
	pid    int
	zombie bool
	desc   string // pid and command line
}

// children lists this process's children.
func children() []child {
	self := os.Getpid()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []child
	for _, path := range stats {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses, so split after its last ')'.
		end := bytes.LastIndexByte(data, ')')
		if end < 0 {
			continue
		}
		fields := strings.Fields(string(data[end+1:]))
		if len(fields) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		if ppid != self {
			continue
		}
		pid, _ := strconv.Atoi(strings.Fields(string(data[:end]))[0])
		cmdline, _ := os.ReadFile(filepath.Join(filepath.Dir(path), "cmdline"))
		desc := fmt.Sprintf("pid %d: %s", pid, strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " ")))
		out = append(out, child{pid: pid, zombie: fields[0] == "Z", desc: desc})
	}
	return out
}

func processesLeft(grace time.Duration) []string {
	deadline := time.Now().Add(grace)
	for {
		var running []child
		for _, c := range children() {
			if c.zombie {
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(c.pid, &ws, syscall.WNOHANG, nil)
			} else {
				running = append(running, c)
			}
		}
		if len(running) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			left := make([]string, len(running))
			for i, c := range running {
				left[i] = c.desc
				_ = syscall.Kill(c.pid, syscall.SIGKILL)
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(c.pid, &ws, 0, nil)
			}
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}
