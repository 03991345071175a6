package test

import (
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream/streamtest"
)

// chaosRounds is how many kills TestRandomKills makes: WEIR_CHAOS_ROUNDS,
// or 8 — enough for CI; docs/RELIABILITY-LOG.md records longer runs.
func chaosRounds() int {
	if n, err := strconv.Atoi(os.Getenv("WEIR_CHAOS_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 8
}

// TestRandomKills runs the dedup service (dedup and publish operators) and
// the checkpoint coordinator as real processes while events stream in, and
// for many rounds kills a random one of them with SIGKILL at a random
// moment — mid-step, mid-checkpoint, mid-publish — and starts it again. In
// the end the sink holds every event exactly once, as a failure-free run
// would. The seed is logged; WEIR_CHAOS_SEED replays a schedule.
func TestRandomKills(t *testing.T) {
	if testing.Short() {
		t.Skip("kills real processes")
	}
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c := loadContract(t)
	rounds := chaosRounds()
	cfg := genConfig(c, uint64(rounds)*800)
	cfg.Rate = 2000
	want, _ := expected(t, cfg)

	seed := time.Now().UnixNano()
	if s, err := strconv.ParseInt(os.Getenv("WEIR_CHAOS_SEED"), 10, 64); err == nil {
		seed = s
	}
	rng := rand.New(rand.NewSource(seed))
	t.Logf("seed %d, %d rounds", seed, rounds)

	dir := t.TempDir()
	env := func(child string, extra ...string) []string {
		return append(append(os.Environ(), "WEIR_TEST_CHILD="+child, "NATS_URL="+srv.ClientURL(),
			"WEIR_CONTRACT="+contractPath(t), "WEIR_DATA_DIR="+dir, "WEIR_INSTANCE=0"), extra...)
	}
	procs := map[string]func() *exec.Cmd{
		"dedup": func() *exec.Cmd {
			return exec.Command(os.Args[0], "-test.run=^TestDedupChild$")
		},
		"coordinator": func() *exec.Cmd {
			return exec.Command(os.Args[0], "-test.run=^TestCoordinatorChild$")
		},
	}
	envs := map[string][]string{
		"dedup":       env("dedup"),
		"coordinator": env("coordinator", "WEIR_CHECKPOINT_INTERVAL=200ms", "WEIR_CHECKPOINT_TIMEOUT=3s", "WEIR_COORDINATOR_LEASE=1s"),
	}
	running := map[string]*exec.Cmd{}
	start := func(name string) {
		cmd := procs[name]()
		cmd.Env = envs[name]
		if testing.Verbose() {
			cmd.Stderr = os.Stderr
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		running[name] = cmd
	}
	kill := func(name string) {
		cmd := running[name]
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
	start("dedup")
	start("coordinator")
	defer func() {
		for _, cmd := range running {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
	}()

	pubDone := make(chan error, 1)
	go func() {
		_, err := publishErr(t.Context(), js, cfg)
		pubDone <- err
	}()
	names := []string{"dedup", "coordinator"}
	kills := map[string]int{}
	for round := 0; round < rounds; round++ {
		// A random moment: let the processes work up to 600ms.
		time.Sleep(time.Duration(50+rng.Intn(550)) * time.Millisecond) // the kill point, not a wait for an outcome
		victim := names[rng.Intn(len(names))]
		kill(victim)
		kills[victim]++
		start(victim)
	}
	if err := <-pubDone; err != nil {
		t.Fatal(err)
	}
	streamtest.CheckFor(t, 120*time.Second, func() error {
		return sinkExactlyOnce(t, js, c, want)
	})
	t.Logf("%d rounds: kills %v; %d events exactly once at the sink", rounds, kills, len(want))
}
