package contracts

import "testing"

func TestShippedContractsLoad(t *testing.T) {
	names := ShippedNames()
	if len(names) == 0 {
		t.Fatal("no shipped contracts")
	}
	for _, n := range names {
		c, err := Shipped(n)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if c.File != "contracts/"+n+".yaml" {
			t.Errorf("%s: File = %q", n, c.File)
		}
	}
	if _, err := Shipped("no-such"); err == nil {
		t.Fatal("Shipped(no-such) did not fail")
	}
}
