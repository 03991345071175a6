package coordinator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/keygroup"
	"github.com/weirflow/weir/internal/status"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/coordinator"
)

// passThrough stands in for the dedup pipeline's operators: services do
// not import each other, and the status page only needs records to flow.
var passThrough = operator.Func(func(c operator.Env, r record.Record) error { return c.Emit(r) })

// runStatusPipeline runs the nexmark-dedup contract's operators with
// pass-through logic on an embedded JetStream, publishes n events to the
// ingress, and runs a coordinator serving its status page. It returns the
// page's base URL once the status shows every event processed and a
// completed checkpoint.
func runStatusPipeline(t *testing.T, n int) (string, status.Status) {
	t.Helper()
	srv := natstest.Run(t)
	url := srv.ClientURL()
	nc := srv.Connect(t)
	js, _ := jetstream.New(nc)
	c, err := contracts.Shipped("nexmark-dedup")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: c.Ingress.Stream,
		Subjects: []string{c.Ingress.SubjectPrefix + ".*"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	layout := keygroup.Layout{Groups: c.State.KeyGroups, Partitions: c.Ingress.Partitions}
	start := time.Now().Add(-time.Minute)
	for i := range n {
		id := "e-" + strconv.Itoa(i)
		m := nats.NewMsg(c.Ingress.Subject(layout.Partition([]byte(id))))
		m.Header.Set("Weir-Producer", "status-test")
		m.Data = fmt.Appendf(nil, `{"id":%q,"key":"k%d","ts":%d}`, id, i%7, start.Add(time.Duration(i)*10*time.Millisecond).UnixMilli())
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}

	pass := map[string]stream.Factory{}
	for _, op := range c.Operators {
		pass[op.ID] = func(*contracts.Contract) (operator.Operator, error) { return passThrough, nil }
	}
	pipeline := streamtest.Run(t, url, c, t.TempDir(), pass)
	rctx, cancel := context.WithCancel(ctx)
	co, err := coordinator.New(coordinator.Config{NATSURL: url, Contract: c, Holder: "status-test",
		Interval: 300 * time.Millisecond, Timeout: 5 * time.Second, Lease: 2 * time.Second, StatusAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	coDone := make(chan error, 1)
	go func() { coDone <- co.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-coDone; err != nil {
			t.Errorf("coordinator: %v", err)
		}
		pipeline.Stop()
		if u := co.StatusURL(); u != "" {
			t.Errorf("status page still at %s after Run returned", u)
		}
	})
	streamtest.CheckFor(t, 10*time.Second, func() error {
		if co.StatusURL() == "" {
			return errors.New("no status URL")
		}
		return nil
	})
	base := co.StatusURL()
	var s status.Status
	streamtest.CheckFor(t, 60*time.Second, func() error {
		var err error
		if s, err = fetchStatus(base); err != nil {
			return err
		}
		return processedAll(s, n)
	})
	return base, s
}

func fetchStatus(base string) (status.Status, error) {
	var s status.Status
	resp, err := http.Get(base + "/status.json")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return s, fmt.Errorf("status.json: %s: %s", resp.Status, b)
	}
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// processedAll says what is still missing before the status shows every
// operator's instance through all n events, with a watermark and a
// completed checkpoint.
func processedAll(s status.Status, n int) error {
	if len(s.Operators) != 2 || s.Operators[0].ID != "dedup" || s.Operators[1].ID != "publish" {
		return fmt.Errorf("operators %+v", s.Operators)
	}
	for _, o := range s.Operators {
		if len(o.Instances) != 1 {
			return fmt.Errorf("%s has %d instances", o.ID, len(o.Instances))
		}
		in := o.Instances[0]
		switch {
		case !in.Responding || !in.Registered || !in.Stats.Ready:
			return fmt.Errorf("%s/%s responding %v registered %v ready %v (%s)", o.ID, in.Instance, in.Responding, in.Registered, in.Stats.Ready, in.Error)
		case in.Stats.In != int64(n) || o.In != int64(n):
			return fmt.Errorf("%s in %d, want %d", o.ID, in.Stats.In, n)
		case in.Stats.Watermark.IsZero() || o.Watermark.IsZero():
			return fmt.Errorf("%s has no watermark", o.ID)
		case in.Lag != 0:
			return fmt.Errorf("%s lag %d", o.ID, in.Lag)
		}
	}
	if s.Latest == nil || len(s.Checkpoints) == 0 {
		return errors.New("no completed checkpoint")
	}
	return nil
}

// TestStatusJSON: the coordinator's /status.json shows the graph, each
// instance's counters and watermark, the inputs' consumers and lag, the
// edges' streams, the lease holder and the checkpoint log.
func TestStatusJSON(t *testing.T) {
	const n = 400
	base, s := runStatusPipeline(t, n)
	if s.Pipeline != "nexmark" || s.Leader != "status-test" || len(s.Coordinators) != 1 || !s.Coordinators[0].Leader {
		t.Fatalf("pipeline %q leader %q coordinators %+v", s.Pipeline, s.Leader, s.Coordinators)
	}
	dedup := s.Operators[0].Instances[0]
	if len(dedup.Inputs) != 4 || dedup.Inputs[0].Name != "ingress/0" || dedup.Inputs[0].Consumer != "nexmark_dedup_0_ingress_0" {
		t.Fatalf("dedup inputs %+v", dedup.Inputs)
	}
	delivered := 0
	for _, in := range dedup.Inputs {
		if in.Error != "" {
			t.Fatalf("input %s: %s", in.Name, in.Error)
		}
		if in.Delivered > 0 {
			delivered++
		}
	}
	if delivered == 0 {
		t.Fatalf("no input delivered anything: %+v", dedup.Inputs)
	}
	edges := map[string]status.Edge{}
	for _, e := range s.Edges {
		edges[e.Name] = e
	}
	if e := edges["ingress"]; e.Stream != "NEXMARK" || e.Messages != n || len(e.To) != 1 || e.To[0] != "dedup" || len(e.Partitions) != 4 {
		t.Fatalf("ingress %+v", e)
	}
	var sum uint64
	for _, p := range edges["ingress"].Partitions {
		sum += p.Messages
	}
	if sum != n {
		t.Fatalf("ingress partitions hold %d messages, want %d", sum, n)
	}
	if e := edges["deduped"]; e.Stream != "WEIR_NEXMARK_DEDUPED" || e.From != "dedup" || e.Messages == 0 || e.Error != "" {
		t.Fatalf("deduped %+v", e)
	}
	if e := edges["events"]; e.From != "publish" || e.Messages != n || e.Format != "json" {
		t.Fatalf("events %+v", e)
	}
	latest := s.Latest.ID
	var found bool
	for i, c := range s.Checkpoints {
		if i > 0 && c.ID >= s.Checkpoints[i-1].ID {
			t.Fatalf("checkpoints not newest first: %+v", s.Checkpoints)
		}
		if c.ID == latest {
			found = c.Status == "complete" && c.Acks == 2 && c.Expected == 2 && c.FullBytes > 0 && c.Took > 0
		}
	}
	if !found {
		t.Fatalf("latest checkpoint %d not in the log as complete with figures: %+v", latest, s.Checkpoints)
	}
	if len(s.Problems) != 0 {
		t.Fatalf("problems: %v", s.Problems)
	}
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), "text/html") || !bytes.Contains(page, []byte("status.json")) {
		t.Fatalf("GET / answered %s %s:\n%.200s", resp.Status, resp.Header.Get("Content-Type"), page)
	}
	if resp, err := http.Get(base + "/nothing"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /nothing: %v %v", resp.Status, err)
	}
}

// chromium finds a Chromium or Chrome binary, or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no headless browser: install Chromium to run the status page test (Debian/Ubuntu: apt-get install chromium)")
	return ""
}

// TestStatusPageRendersInChromium loads the status page in headless
// Chromium, lets its script fetch status.json and render, and checks the
// rendered DOM for the operators, a watermark and the checkpoint table;
// it also takes a screenshot (kept in $WEIR_SCREENSHOT_DIR when set).
func TestStatusPageRendersInChromium(t *testing.T) {
	bin := chromium(t)
	base, s := runStatusPipeline(t, 300)
	// run runs the browser for at most 60 s.
	run := func(args ...string) (out []byte, stderr string, err error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		args = append([]string{"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
			"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=3000"}, args...)
		var buf bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, append(args, base+"/")...)
		cmd.Stderr = &buf
		// Chromium's renderers and zygote are its children: a timeout kills
		// the whole process group, and so does the end of a run, so none
		// is left writing into the test's directories.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 5 * time.Second
		out, err = cmd.Output()
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		if err != nil {
			err = fmt.Errorf("%s %v: %w", bin, args, err)
		}
		return out, buf.String(), err
	}
	out, stderr, err := run("--dump-dom")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	dom := string(out)
	for _, want := range []string{"pipeline nexmark", `data-id="o:dedup"`, `data-id="o:publish"`, `data-id="e:deduped"`, "WEIR_NEXMARK_DEDUPED", "<path d="} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered page lacks %q", want)
		}
	}
	// Watermarks render as local date and time with milliseconds.
	if !regexp.MustCompile(`class="wm">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}`).MatchString(dom) {
		t.Errorf("rendered page shows no watermark")
	}
	table := dom[strings.Index(dom, `id="checkpoints"`):]
	for _, want := range []string{"start delay", `<span class="badge complete">complete</span>`, fmt.Sprintf(`<td class="num">%d</td>`, s.Latest.ID)} {
		if !strings.Contains(table, want) {
			t.Errorf("checkpoint table lacks %q", want)
		}
	}
	if !strings.Contains(dom, `<span id="updated">updated `) {
		t.Errorf("the page could not fetch status.json")
	}
	if t.Failed() {
		t.Fatalf("rendered DOM:\n%s", dom)
	}

	dir := os.Getenv("WEIR_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	shot := filepath.Join(dir, "weir-status.png")
	// Chromium sometimes writes the screenshot and then does not exit (on
	// a loaded machine, seen once in CI: killed at 60 s after "bytes
	// written to file"). The screenshot is what is checked, so a browser
	// that wrote it and hung is logged, not failed.
	if _, stderr, err := run("--screenshot="+shot, "--window-size=1280,900", "--hide-scrollbars"); err != nil {
		if !strings.Contains(stderr, "written to file") {
			t.Fatalf("%v\n%s", err, stderr)
		}
		t.Logf("the browser wrote the screenshot and did not exit: %v", err)
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 900 {
		t.Fatalf("screenshot is %v, want 1280x900", b)
	}
	// A blank page is one colour; a rendered one has many.
	colours := map[uint32]bool{}
	for y := 0; y < 900; y += 7 {
		for x := 0; x < 1280; x += 7 {
			r, g, b, _ := img.At(x, y).RGBA()
			colours[r>>8<<16|g>>8<<8|b>>8] = true
		}
	}
	if len(colours) < 20 {
		t.Fatalf("screenshot has %d colours: blank?", len(colours))
	}
	t.Logf("screenshot: %s (%d colours sampled)", shot, len(colours))
}
