package main

import (
	bytespkg "bytes"
	"context"
	"regexp"
	"strings"
	"testing"
)

// TestEveryCommandHasHelp: `weir COMMAND -h` prints the command's usage on
// stdout and ends well, and every flag it lists names its environment
// variable.
func TestEveryCommandHasHelp(t *testing.T) {
	flagLine := regexp.MustCompile(`(?m)^  -(\S+)`)
	for _, cmd := range [][]string{
		{"demo"}, {"tail"}, {"status"}, {"checkpoint"}, {"checkpoint", "list"}, {"checkpoint", "trigger"},
		{"savepoint"}, {"savepoint", "create"}, {"savepoint", "list"}, {"savepoint", "restore"},
		{"scale"}, {"bench"}, {"bench", "hop"}, {"contract"}, {"contract", "lint"}, {"contract", "show"},
		{"view"}, {"view", "get"}, {"view", "list"}, {"view", "watch"}, {"effects"}, {"effects", "list"}, {"effects", "retry"}, {"effects", "reconcile"}, {"capacity"}, {"recover"}, {"audit"}, {"replay"}, {"compare"}, {"migrate"}, {"migrate", "check"}, {"cutover"}, {"auth"}, {"provision"},
	} {
		var stdout, stderr bytespkg.Buffer
		args := append(append([]string{}, cmd...), "-h")
		if err := run(context.Background(), args, func(string) string { return "" }, &stdout, &stderr); err != nil {
			t.Errorf("weir %s: %v", strings.Join(args, " "), err)
			continue
		}
		out := stdout.String()
		if !strings.Contains(strings.ToLower(out), "usage") || stderr.Len() > 0 {
			t.Errorf("weir %s printed no usage on stdout:\n%s\nstderr:\n%s", strings.Join(args, " "), out, stderr.String())
		}
		for _, m := range flagLine.FindAllStringSubmatchIndex(out, -1) {
			line := out[m[0]:]
			if i := strings.Index(line[1:], "\n  -"); i >= 0 {
				line = line[:i+1]
			}
			if !regexp.MustCompile(`\((NATS_[A-Z_]+|WEIR_[A-Z_]+)\)`).MatchString(line) {
				t.Errorf("weir %s: flag -%s names no environment variable:\n%s", strings.Join(cmd, " "), out[m[2]:m[3]], line)
			}
		}
	}
}
