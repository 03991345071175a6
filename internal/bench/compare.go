package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
)

// CompareRounds is how many times CompareHop runs each hop.
const CompareRounds = 3

// syncAlwaysShare divides the record count of the per-message SyncAlways
// hop, which is two orders of magnitude slower than the others: its rate is
// steady long before it has seen all their records.
const syncAlwaysShare = 20

// CompareHop measures, side by side in one process, (a) weir's framed hop
// under SyncAlways, (b) one JetStream message per record under SyncAlways
// and (c) one message per record under the server's default sync interval.
// Hops (a) and (c) carry records records; (b) carries records/20, but at
// least 1000 (or records, if fewer). Each hop runs CompareRounds times, the
// order rotating every round so that no hop always runs first or last on a
// warm or busy machine, each on a fresh server in dir. CompareHop writes a
// table of records per second, the median of each hop, and the ratios
// (a)/(b) and (a)/(c) to w.
func CompareHop(ctx context.Context, dir string, records int, w io.Writer) error {
	if records <= 0 {
		return fmt.Errorf("bench: compare %d records, want at least 1", records)
	}
	hops := []HopConfig{
		{Mode: Framed, Records: records, Dir: dir},
		{Mode: PerMessage, Records: max(records/syncAlwaysShare, min(records, 1000)), Dir: dir},
		{Mode: PerMessage, Relaxed: true, Records: records, Dir: dir},
	}
	results := make([][]HopResult, len(hops))
	for round := range CompareRounds {
		for k := range hops {
			i := (round + k) % len(hops)
			res, err := Hop(ctx, hops[i])
			if err != nil {
				return fmt.Errorf("bench: round %d, %s: %w", round+1, hops[i].Name(), err)
			}
			results[i] = append(results[i], res)
		}
	}
	medians := make([]float64, len(hops))
	for i, rs := range results {
		rates := make([]float64, len(rs))
		for j, r := range rs {
			rates[j] = r.RecordsPerSec
		}
		slices.Sort(rates)
		medians[i] = rates[len(rates)/2]
	}

	fmt.Fprintf(w, "edge hop: publish, consume and ack, records/s; %d rounds, order rotating\n\n", CompareRounds)
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprint(tw, "hop\trecords\tmessages\t")
	for round := range CompareRounds {
		fmt.Fprintf(tw, "round %d\t", round+1)
	}
	fmt.Fprint(tw, "median\n")
	for i, c := range hops {
		fmt.Fprintf(tw, "(%c) %s\t%d\t%d\t", 'a'+i, c.Name(), c.Records, results[i][0].Frames)
		for _, r := range results[i] {
			fmt.Fprintf(tw, "%.0f\t", r.RecordsPerSec)
		}
		fmt.Fprintf(tw, "%.0f\n", medians[i])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n(a)/(b) = %.1fx\n(a)/(c) = %.1fx\n", medians[0]/medians[1], medians[0]/medians[2])
	return err
}
