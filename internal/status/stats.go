package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/internal/status/meta"
	"github.com/weirflow/weir/internal/strictjson"
)

// The service protocol of an operator instance. Each registers with the
// nats.go micro framework as ServiceName(operator), with metadata naming
// its pipeline, operator, instance and contract fingerprint
// (InstanceMetadata), and answers its Stats, as JSON, on EndpointSubject
// (EncodeStats; RequestStats asks for them). Coordinators register as
// CoordinatorService(pipeline) with metadata naming the pipeline, the
// lease holder and the memory it declares (CoordinatorMetadata).
const (
	servicePrefix = "weir-"
	// Endpoint is the name of an instance's status endpoint.
	Endpoint = "status"
)

// ServiceName is the micro service name of an operator's instances.
func ServiceName(operator string) string { return servicePrefix + operator }

// CoordinatorService is the micro service name of pipeline's
// coordinators: discovery asks them by it, and no other pipeline's
// coordinator hears the question (it could not answer it).
func CoordinatorService(pipeline string) string { return servicePrefix + "coordinator-" + pipeline }

// EndpointSubject is where an instance answers its Stats.
func EndpointSubject(pipeline, operator, instance string) string {
	return "weir.svc." + pipeline + "." + operator + "." + instance + ".status"
}

// Stats are an instance's running totals since it started.
type Stats struct {
	Operator string `json:"operator"`
	Instance string `json:"instance"`
	Ready    bool   `json:"ready"`
	// Ended counts the ingress inputs of a bounded replay (weir replay)
	// the instance has read to the end of its range.
	Ended int64 `json:"ended,omitempty"`
	// Steps committed.
	Steps int64 `json:"steps"`
	// In counts data records handed to the operator; Out counts records it
	// emitted, once stored downstream (or held, for a transactional sink).
	In  int64 `json:"in"`
	Out int64 `json:"out"`
	// Storing counts the messages (frames, results) of the last committed
	// step still being stored downstream while the next step runs.
	Storing int64 `json:"storing,omitempty"`
	// DeadLettered and SideOutput count records filed instead of processed.
	DeadLettered int64 `json:"dead_lettered"`
	SideOutput   int64 `json:"side_output"`
	// Busy, Backpressured and Idle are the shares of the wall clock, over
	// the last LoadSeconds (about ten), the instance spent running steps,
	// waiting for the broker to store its output, and waiting for input.
	Busy          float64 `json:"busy"`
	Backpressured float64 `json:"backpressured"`
	Idle          float64 `json:"idle"`
	LoadSeconds   float64 `json:"load_seconds"`
	// HotKeyGroup is the key group of the most records over about the
	// last 10 to 20 seconds, of the KeyGroupRecords the instance handled;
	// HotShare its share and KeyGroupSkew its count over the mean of the
	// instance's key groups (1 is even; the number of groups is all in
	// one). A hot key shows as one group far above the others.
	HotKeyGroup     int     `json:"hot_key_group"`
	HotShare        float64 `json:"hot_share"`
	KeyGroupSkew    float64 `json:"key_group_skew"`
	KeyGroupRecords int64   `json:"key_group_records"`
	// Replayed is what the instance's consumers had to deliver when it
	// last started: after a restore, the records past the checkpoint's
	// positions it reads again, plus any backlog.
	Replayed int64 `json:"replayed"`
	// Memory is the resident memory, in bytes, the instance declares it
	// stays under (its budget: runtime, state, input and output buffers).
	Memory int64 `json:"memory,omitempty"`
	// InputBuffered is the bytes of input delivered and not yet
	// acknowledged, out of the reader's byte budget InputBudget.
	InputBuffered int64 `json:"input_buffered,omitempty"`
	InputBudget   int64 `json:"input_budget,omitempty"`
	// StateIO is the share of the same window spent committing steps to
	// the state store (the batch and its fsync), part of Busy; InputBusy,
	// per input partition, the share spent decoding and processing its
	// messages.
	StateIO   float64            `json:"state_io,omitempty"`
	InputBusy map[string]float64 `json:"input_busy,omitempty"`
	// StateBytes is, per state family, the bytes of its live state, keys
	// and values, as of the last complete sweep of the store (a slice of
	// keys per tick).
	StateBytes map[string]int64 `json:"state_bytes,omitempty"`
	// Timers is how many timers are registered and not yet fired.
	Timers int64 `json:"timers,omitempty"`
	// StepOutputMax is the largest output one step staged, in bytes.
	StepOutputMax int64 `json:"step_output_max,omitempty"`
	// Shed counts ingress records dropped by overload policy shed, each
	// recorded by its coordinate on weir.<pipeline>.shed.<operator>.
	Shed int64 `json:"shed,omitempty"`
	// Erased counts records dropped because their key was erased before
	// they were written (deletion.replay erasure-wins): a restore or a
	// replay reading them again.
	Erased int64 `json:"erased,omitempty"`
	// Redelivered counts input messages dropped because the committed
	// position had passed them; DuplicateFrames counts frames dropped by
	// frame sequence.
	Redelivered     int64 `json:"redelivered"`
	DuplicateFrames int64 `json:"duplicate_frames"`
	// FencedFrames counts frames of a restored writer's older generation
	// written after its restore cut: a zombie's output, ignored.
	FencedFrames int64 `json:"fenced_frames"`
	Control      int64 `json:"control_records"`
	Retries      int64 `json:"retries"`
	TimersFired  int64 `json:"timers_fired"`
	// Released counts the results a transactional sink published once
	// their checkpoint completed; HeldEpochs is how many checkpoint epochs
	// of results it holds now.
	Released   int64 `json:"released,omitempty"`
	HeldEpochs int64 `json:"held_epochs,omitempty"`
	// AlreadyStored counts held results a transactional sink found in the
	// result stream at start, by the commit markers, and released without
	// publishing them again.
	AlreadyStored int64 `json:"already_stored,omitempty"`
	// StaleVersions counts panes a versioned view rejected because it held
	// the same or a newer version of their window.
	StaleVersions int64 `json:"stale_versions,omitempty"`
	// Watermark is the operator's watermark; zero before the first.
	Watermark time.Time `json:"watermark,omitzero"`
	// Paused lists the inputs paused for running ahead of the others.
	Paused []string `json:"paused,omitempty"`
	// StateKeys is the live key count per state family.
	StateKeys map[string]int64 `json:"state_keys,omitempty"`
	// InputWatermarks are the watermarks of the instance's inputs as of
	// its last step.
	InputWatermarks map[string]time.Time `json:"input_watermarks,omitempty"`
}

// InstanceMetadata is what an operator instance registers with.
func InstanceMetadata(pipeline, operator, instance, fingerprint string) map[string]string {
	return map[string]string{meta.Pipeline: pipeline, meta.Operator: operator, meta.Instance: instance, meta.Contract: fingerprint}
}

// CoordinatorMetadata is what a coordinator registers with.
func CoordinatorMetadata(pipeline, holder string, memory int64) map[string]string {
	return map[string]string{meta.Pipeline: pipeline, meta.Holder: holder, meta.Memory: strconv.FormatInt(memory, 10)}
}

// coordinatorOf reads a coordinator's registration.
func coordinatorOf(info micro.Info) (CoordinatorRef, error) {
	ref := CoordinatorRef{Holder: info.Metadata[meta.Holder], Service: info.ID}
	if m, ok := info.Metadata[meta.Memory]; ok {
		var err error
		if ref.Memory, err = strconv.ParseInt(m, 10, 64); err != nil {
			return ref, fmt.Errorf("status: coordinator %s: %s %q: %w", ref.Holder, meta.Memory, m, err)
		}
	}
	return ref, nil
}

// EncodeStats encodes an instance's Stats as its status endpoint answers.
func EncodeStats(s Stats) ([]byte, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("status: encode stats of %s/%s: %w", s.Operator, s.Instance, err)
	}
	return b, nil
}

// DecodeStats decodes an instance's Stats as EncodeStats encodes them,
// strictly: unknown fields or trailing data are refused, and so are
// Stats that name no operator or instance.
func DecodeStats(b []byte) (Stats, error) {
	var s Stats
	if err := strictjson.Decode(b, &s); err != nil {
		return Stats{}, fmt.Errorf("status: decode stats: %w", err)
	}
	if s.Operator == "" || s.Instance == "" {
		return Stats{}, errors.New("status: decode stats: no operator or instance")
	}
	return s, nil
}

// RequestStats asks the instance of operator of pipeline for its Stats.
func RequestStats(ctx context.Context, nc *nats.Conn, pipeline, operator, instance string) (Stats, error) {
	return requestStats(ctx, nc, EndpointSubject(pipeline, operator, instance))
}

func requestStats(ctx context.Context, nc *nats.Conn, subject string) (Stats, error) {
	m, err := natsconn.Ask(ctx, nc, subject, nil)
	if err != nil {
		return Stats{}, fmt.Errorf("status: %s: %w", subject, err)
	}
	return DecodeStats(m.Data)
}
