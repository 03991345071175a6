package test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream/streamtest"
)

// broker is a NATS server a test can restart.
type broker interface {
	ClientURL() string
	Restart() error
	Connect(testing.TB) *nats.Conn
}

// TestNATSServerRestartMidRun restarts the NATS server under a running
// pipeline, twice, while it processes: the operators reconnect, their
// consumers resume from the committed positions, and every event reaches
// the sink exactly once. With the server embedded in the test process, and
// as an external nats-server process (stopped and started again like an
// operator would).
func TestNATSServerRestartMidRun(t *testing.T) {
	t.Run("embedded", func(t *testing.T) { restartMidRun(t, natstest.Run(t)) })
	t.Run("external", func(t *testing.T) {
		if testing.Short() {
			t.Skip("builds and runs nats-server")
		}
		restartMidRun(t, startExternalNATS(t))
	})
}

func restartMidRun(t *testing.T, srv broker) {
	js, _ := jetstream.New(srv.Connect(t))
	c := loadContract(t)
	cfg := genConfig(c, 6000)
	cfg.Gen.Hard.FutureEvery = 0
	all := cfg
	all.Count = 6000
	want, _ := expected(t, all)
	rts, _ := runPipeline(t, srv.ClientURL(), c, t.TempDir())
	for part := uint64(0); part < 3; part++ {
		pc := cfg
		pc.Start, pc.Count = part*2000, 2000
		if part > 0 {
			js, _ = jetstream.New(srv.Connect(t))
		}
		publish(t, js, pc)
		// Restart while the pipeline is still working through the part.
		streamtest.CheckFor(t, 60*time.Second, func() error {
			if s := rts[0].Stats(); s.In < int64(part*1500+200) {
				return fmt.Errorf("dedup at %d", s.In)
			}
			return nil
		})
		if part < 2 {
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
		}
	}
	js, _ = jetstream.New(srv.Connect(t))
	streamtest.CheckFor(t, 90*time.Second, func() error {
		return sinkExactlyOnce(t, js, c, want)
	}, func() string {
		return fmt.Sprintf("dedup %+v\npublish %+v", rts[0].Stats(), rts[1].Stats())
	})
}

// externalNATS is a nats-server process built from the module weir pins,
// with JetStream syncing every write, as deploy/nats.conf configures it.
type externalNATS struct {
	t    testing.TB
	bin  string
	conf string
	port int
	cmd  *exec.Cmd
}

func startExternalNATS(t *testing.T) *externalNATS {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "nats-server")
	build := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build nats-server: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	conf := filepath.Join(dir, "nats.conf")
	store := filepath.Join(dir, "data")
	err = os.WriteFile(conf, []byte("listen: 127.0.0.1:"+strconv.Itoa(port)+"\nmax_payload: 8MB\njetstream {\n  store_dir: \""+store+"\"\n  sync_interval: always\n}\n"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	s := &externalNATS{t: t, bin: bin, conf: conf, port: port}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *externalNATS) start() {
	s.cmd = exec.Command(s.bin, "-c", s.conf)
	if testing.Verbose() {
		s.cmd.Stderr = os.Stderr
	}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	streamtest.CheckFor(s.t, 30*time.Second, func() error {
		nc, err := nats.Connect(s.ClientURL())
		if err != nil {
			return err
		}
		nc.Close()
		return nil
	})
}

func (s *externalNATS) stop() {
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

func (s *externalNATS) ClientURL() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

func (s *externalNATS) Restart() error {
	s.stop()
	s.start()
	return nil
}

func (s *externalNATS) Connect(t testing.TB) *nats.Conn {
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
