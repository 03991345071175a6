//go:build release

package main

import (
	"context"
	"io"
)

// A release build has no development harness (harness.go).
const harnessUsage = ""

func harnessCommand(string) func(context.Context, []string, func(string) string, io.Writer, io.Writer) error {
	return nil
}
