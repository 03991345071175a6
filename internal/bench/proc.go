package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/PID/stat: 100
// on every Linux architecture Go builds for.
const clockTicks = 100

// Usage is what a process has used since it started: CPU time in user and
// kernel mode, and its peak resident memory.
type Usage struct {
	CPU     time.Duration
	PeakRSS int64 // bytes
}

// ReadUsage reads process pid's usage from /proc. Two readings bracket a
// measurement: the difference of their CPU is the CPU the process spent in
// between.
func ReadUsage(pid int) (Usage, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Usage{}, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// the fields after it start after the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return Usage{}, fmt.Errorf("bench: /proc/%d/stat: no command name", pid)
	}
	f := bytes.Fields(stat[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return Usage{}, fmt.Errorf("bench: /proc/%d/stat: %d fields", pid, len(f)+2)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(string(s), 10, 64)
		if err != nil {
			return Usage{}, fmt.Errorf("bench: /proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	u := Usage{CPU: time.Duration(ticks) * time.Second / clockTicks}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Usage{}, err
	}
	for line := range bytes.Lines(status) {
		if v, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
			kb, err := strconv.ParseInt(string(bytes.TrimSuffix(bytes.TrimSpace(v), []byte(" kB"))), 10, 64)
			if err != nil {
				return Usage{}, fmt.Errorf("bench: /proc/%d/status VmHWM: %w", pid, err)
			}
			u.PeakRSS = kb << 10
		}
	}
	return u, nil
}
