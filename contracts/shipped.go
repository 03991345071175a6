package contracts

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// shipped holds the contract files in this directory, compiled into every
// binary so that `weir demo` runs from anywhere.
//
//go:embed *.yaml
var shipped embed.FS

// Shipped returns a contract shipped with weir, by file name without
// ".yaml" (for example "nexmark-dedup"), linted like any other.
func Shipped(name string) (*Contract, error) {
	data, err := ShippedSource(name)
	if err != nil {
		return nil, err
	}
	c, err := Parse(path.Join("contracts", name+".yaml"), data)
	if err != nil {
		return nil, err
	}
	if problems := c.Lint(); len(problems) > 0 {
		return nil, &Invalid{Problems: problems}
	}
	return c, nil
}

// ShippedSource returns the text of a shipped contract, by name, as
// written.
func ShippedSource(name string) ([]byte, error) {
	data, err := shipped.ReadFile(name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("contracts: no shipped contract %q (have %s)", name, strings.Join(ShippedNames(), ", "))
	}
	return data, nil
}

// ShippedNames lists the shipped contracts.
func ShippedNames() []string {
	entries, _ := fs.ReadDir(shipped, ".")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(names)
	return names
}
