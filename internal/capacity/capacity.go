// Package capacity is the capacity, replay and recovery arithmetic of a
// pipeline: from measured rates and sizes, whether it can catch up and how
// long that takes, the source retention a recovery needs, the broker bytes
// that retention costs, the checkpoint upload lower bounds and the replay
// a recovery starts with. `weir capacity` prints it, from flags or from a
// running pipeline.
//
// The arithmetic, with r_in the peak arrival rate, r_proc the sustainable
// processing rate (checkpoints and sinks on), L the backlog, I the
// checkpoint interval:
//
//	catch-up          = backlog / (r_proc − r_in), never when r_proc ≤ r_in
//	recovery backlog  = L + r_in · (I + detection + repair + restore)
//	required retention = I + detection + repair + restore + catch-up of the
//	                     recovery backlog + validation margin
//	broker bytes      = r_in · bytes per record · retention · replicas
//	full upload       ≥ S / b_cp;  incremental upload ≥ ΔS / b_cp
//	replay at recovery ≈ r_in · I + L
//
// A recovery restores the checkpoint taken up to I before the failure, so
// the oldest record it needs is I older than the failure; everything that
// arrives while the failure is noticed, repaired and restored waits, and
// then has to be caught up with.
package capacity

import (
	"fmt"
	"math"
	"time"
)

// Inputs are the measured figures. A zero rate or size is unknown, and
// the figures that need it are left out.
type Inputs struct {
	// ArrivalRate is the peak sustained arrival rate, records/s (r_in).
	ArrivalRate float64 `json:"arrival_rate"`
	// RecordBytes is the stored size of a record, broker overhead
	// included (s_event).
	RecordBytes float64 `json:"record_bytes"`
	// ProcessRate is the sustainable processing rate with checkpoints and
	// sinks on, records/s (r_proc). ProcessRateAtLeast says it was
	// measured while the pipeline kept up, so it is only a lower bound —
	// the arrival rate — and the figures that need r_proc stay unknown.
	ProcessRate        float64 `json:"process_rate"`
	ProcessRateAtLeast bool    `json:"process_rate_at_least,omitempty"`
	// Backlog is the records not processed yet (L).
	Backlog float64 `json:"backlog"`
	// StateBytes is the durable state (S); ChangedBytes what a checkpoint
	// uploads (ΔS, changed and newly referenced bytes); Bandwidth the
	// checkpoint storage bandwidth, bytes/s (b_cp).
	StateBytes   float64 `json:"state_bytes"`
	ChangedBytes float64 `json:"changed_bytes"`
	Bandwidth    float64 `json:"checkpoint_bandwidth"`
	// Interval is the checkpoint interval (I).
	Interval time.Duration `json:"interval"`
	// Replicas of the source stream.
	Replicas int `json:"replicas"`
	// Detection, Repair, Restore and Margin make up the recovery: how long
	// a failure takes to notice, to repair or provision for, to restore
	// from, and the margin kept for validation.
	Detection time.Duration `json:"detection"`
	Repair    time.Duration `json:"repair"`
	Restore   time.Duration `json:"restore"`
	Margin    time.Duration `json:"margin"`
	// Retention is the source's declared retention (ingress.retention);
	// MaxAge, MaxBytes and MaxMsgs the stream's own limits, 0 when none.
	Retention time.Duration `json:"retention"`
	MaxAge    time.Duration `json:"max_age,omitempty"`
	MaxBytes  int64         `json:"max_bytes,omitempty"`
	MaxMsgs   int64         `json:"max_msgs,omitempty"`
}

// Figures are what the arithmetic gives. Durations that cannot be
// computed are negative; Never says the pipeline cannot catch up.
type Figures struct {
	// CatchUp is how long the current backlog takes to drain.
	CatchUp time.Duration `json:"catch_up"`
	// Never is set when r_proc ≤ r_in: waiting does not catch up.
	Never bool `json:"never,omitempty"`
	// RecoveryBacklog is what waits after a failure, and RecoveryCatchUp
	// how long it takes to drain.
	RecoveryBacklog float64       `json:"recovery_backlog"`
	RecoveryCatchUp time.Duration `json:"recovery_catch_up"`
	// RequiredRetention is the source retention a recovery needs.
	RequiredRetention time.Duration `json:"required_retention"`
	// KeptFor is how long the stream actually keeps records at the
	// arrival rate: the least of its age limit and what its byte and
	// message limits hold.
	KeptFor time.Duration `json:"kept_for"`
	// BrokerBytes are the bytes the source holds over its retention,
	// replicas included; RequiredBrokerBytes over the required retention.
	BrokerBytes         float64 `json:"broker_bytes"`
	RequiredBrokerBytes float64 `json:"required_broker_bytes"`
	// FullUpload and IncrementalUpload are lower bounds of a checkpoint's
	// upload.
	FullUpload        time.Duration `json:"full_upload"`
	IncrementalUpload time.Duration `json:"incremental_upload"`
	// Replay is the records a recovery replays: a checkpoint interval of
	// arrivals plus the backlog.
	Replay float64 `json:"replay"`
	// Problems are the threats to the contract the figures show.
	Problems []string `json:"problems,omitempty"`
}

const unknown = time.Duration(-1)

// seconds converts a figure in seconds to a duration, saturating.
func seconds(s float64) time.Duration {
	if s >= float64(math.MaxInt64)/float64(time.Second) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(s * float64(time.Second))
}

// Compute does the arithmetic.
func Compute(in Inputs) Figures {
	f := Figures{CatchUp: unknown, RecoveryCatchUp: unknown, RequiredRetention: unknown, KeptFor: unknown,
		FullUpload: unknown, IncrementalUpload: unknown}
	outage := in.Interval + in.Detection + in.Repair + in.Restore
	f.RecoveryBacklog = in.Backlog + in.ArrivalRate*outage.Seconds()
	f.Replay = in.ArrivalRate*in.Interval.Seconds() + in.Backlog
	replicas := float64(max(in.Replicas, 1))

	// A rate measured while the pipeline kept up is the arrival rate, not
	// what it could sustain: nothing follows from it.
	if in.ProcessRate > 0 && !in.ProcessRateAtLeast {
		if in.ProcessRate <= in.ArrivalRate {
			f.Never = true
			f.Problems = append(f.Problems, fmt.Sprintf("cannot catch up: processing %.0f records/s does not exceed arrival %.0f/s; a backlog only grows — more capacity, less work, or controlled input (overload.policy)", in.ProcessRate, in.ArrivalRate))
		} else {
			spare := in.ProcessRate - in.ArrivalRate
			f.CatchUp = seconds(in.Backlog / spare)
			f.RecoveryCatchUp = seconds(f.RecoveryBacklog / spare)
			f.RequiredRetention = outage + f.RecoveryCatchUp + in.Margin
			if spare < 0.2*in.ArrivalRate {
				f.Problems = append(f.Problems, fmt.Sprintf("little margin: processing exceeds arrival by %.0f%%, so a recovery catches up slowly (%s)", 100*spare/max(in.ArrivalRate, 1), Round(f.RecoveryCatchUp)))
			}
		}
	}
	if in.ArrivalRate > 0 {
		kept := in.Retention
		if in.MaxAge > 0 && (kept == 0 || in.MaxAge < kept) {
			kept = in.MaxAge
		}
		if in.MaxMsgs > 0 {
			if byMsgs := seconds(float64(in.MaxMsgs) / in.ArrivalRate); kept == 0 || byMsgs < kept {
				kept = byMsgs
			}
		}
		if in.MaxBytes > 0 && in.RecordBytes > 0 {
			if byBytes := seconds(float64(in.MaxBytes) / (in.ArrivalRate * in.RecordBytes)); kept == 0 || byBytes < kept {
				kept = byBytes
			}
		}
		if kept > 0 {
			f.KeptFor = kept
			if kept < in.Retention {
				f.Problems = append(f.Problems, fmt.Sprintf("the stream's limits keep records only %s at %.0f records/s, less than the declared retention %s", Round(kept), in.ArrivalRate, in.Retention))
			}
		}
		if in.RecordBytes > 0 {
			f.BrokerBytes = in.ArrivalRate * in.RecordBytes * in.Retention.Seconds() * replicas
			if f.RequiredRetention > 0 {
				f.RequiredBrokerBytes = in.ArrivalRate * in.RecordBytes * f.RequiredRetention.Seconds() * replicas
			}
		}
	}
	if f.RequiredRetention > 0 {
		if have := min(nonZero(f.KeptFor), nonZero(in.Retention)); have > 0 && have < f.RequiredRetention {
			f.Problems = append(f.Problems, fmt.Sprintf("retention %s is shorter than a recovery needs (%s): records would be gone before the pipeline caught up", Round(have), Round(f.RequiredRetention)))
		}
	}
	if in.Bandwidth > 0 {
		f.FullUpload = seconds(in.StateBytes / in.Bandwidth)
		f.IncrementalUpload = seconds(in.ChangedBytes / in.Bandwidth)
		if in.Interval > 0 && f.IncrementalUpload >= in.Interval {
			f.Problems = append(f.Problems, fmt.Sprintf("a checkpoint's upload (at least %s) takes the whole interval %s: checkpoints overlap or leave no time to process", Round(f.IncrementalUpload), in.Interval))
		}
	}
	return f
}

// nonZero maps 0 and unknown to the largest duration, for min.
func nonZero(d time.Duration) time.Duration {
	if d <= 0 {
		return time.Duration(math.MaxInt64)
	}
	return d
}

// Round shortens a duration for reading: minutes above an hour, seconds
// above a minute.
func Round(d time.Duration) time.Duration {
	switch {
	case d >= time.Hour:
		return d.Round(time.Minute)
	case d >= time.Minute:
		return d.Round(time.Second)
	case d >= time.Second:
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}
