package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/internal/status/meta"
)

// Exit codes.
const (
	healthy   = 0
	unhealthy = 1
	usage     = 2
)

const usageText = `usage:
  weir-healthcheck [flags] operators SERVICE  every operator the contract assigns to SERVICE answers
  weir-healthcheck [flags] micro NAME...      every NAME answers $SRV.PING.NAME
  weir-healthcheck [flags] http URL           GET URL answers 2xx
flags:
`

// run is the command: it returns the exit code and prints one line saying
// why to stdout (healthy) or stderr (unhealthy or usage).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("weir-healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageText)
		fs.PrintDefaults()
	}
	natsURL := getenv("NATS_URL")
	if natsURL == "" {
		natsURL = nats.DefaultURL
	}
	fs.StringVar(&natsURL, "nats", natsURL, "NATS server URL for micro (NATS_URL)")
	var auth natsconn.Auth
	auth.StdFlags(fs)
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if env, ok := natsconn.Env(f.Name); ok {
			f.Usage += " (" + env + ")"
			if v := getenv(env); v != "" {
				if err := f.Value.Set(v); err != nil && envErr == nil {
					envErr = fmt.Errorf("%s: %w", env, err)
				}
			}
		}
	})
	if envErr != nil {
		fmt.Fprintf(stderr, "weir-healthcheck: %v\n", envErr)
		return usage
	}
	instance := fs.String("instance", getenv("WEIR_INSTANCE"), "instance whose answer counts, for services reporting one (WEIR_INSTANCE)")
	contract := fs.String("contract", getenv("WEIR_CONTRACT"), "pipeline contract for operators (WEIR_CONTRACT)")
	operator := fs.String("operator", getenv("WEIR_OPERATOR"), `the service's operator for operators, "*" or empty for all (WEIR_OPERATOR)`)
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return healthy
		}
		return usage
	}
	if fs.NArg() < 2 {
		fs.Usage()
		return usage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var err error
	switch mode, rest := fs.Arg(0), fs.Args()[1:]; mode {
	case "operators":
		if len(rest) != 1 {
			fs.Usage()
			return usage
		}
		var names []string
		if names, err = operatorServices(*contract, rest[0], *operator); err == nil {
			err = checkMicro(ctx, natsURL, auth, *instance, names)
		}
	case "micro":
		err = checkMicro(ctx, natsURL, auth, *instance, rest)
	case "http":
		if len(rest) != 1 {
			fs.Usage()
			return usage
		}
		err = checkHTTP(ctx, rest[0])
	default:
		fmt.Fprintf(stderr, "weir-healthcheck: unknown mode %q\n", mode)
		fs.Usage()
		return usage
	}
	if err != nil {
		fmt.Fprintln(stderr, "weir-healthcheck:", err)
		return unhealthy
	}
	fmt.Fprintf(stdout, "weir-healthcheck: %s ok\n", fs.Arg(0))
	return healthy
}

// operatorServices are the micro service names of the operators a service
// runs: weir-<id> of operator, or, when operator is "*" or empty, of every
// operator the contract assigns to service.
func operatorServices(contract, service, operator string) ([]string, error) {
	if operator != "" && operator != "*" {
		return []string{"weir-" + operator}, nil
	}
	if contract == "" {
		return nil, errors.New("operators needs the contract (-contract or WEIR_CONTRACT)")
	}
	c, err := contracts.Load(contract)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, op := range c.Operators {
		if op.Service == service {
			names = append(names, "weir-"+op.ID)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("contract %s assigns no operator to service %s", contract, service)
	}
	return names, nil
}

// checkHTTP GETs url and wants a 2xx status.
func checkHTTP(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return nil
}

// checkMicro pings every name and waits for an answer that counts from
// each: any answer, or, when instance is set, one whose metadata has no
// instance or names this one.
func checkMicro(ctx context.Context, url string, auth natsconn.Auth, instance string, names []string) error {
	deadline, _ := ctx.Deadline()
	nc, err := auth.Connect(url, nats.Name("weir-healthcheck"), nats.Timeout(time.Until(deadline)), nats.NoReconnect())
	if err != nil {
		return err
	}
	defer nc.Close()
	for _, name := range names {
		if err := ping(ctx, nc, name, instance); err != nil {
			return err
		}
	}
	return nil
}

// ping sends $SRV.PING.<name> and reads answers until one counts.
func ping(ctx context.Context, nc *nats.Conn, name, instance string) error {
	subj, err := micro.ControlSubject(micro.PingVerb, name, "")
	if err != nil {
		return err
	}
	inbox := natsconn.AnswerInbox(nc)
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subj, inbox, nil); err != nil {
		return err
	}
	var others []string
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			return fmt.Errorf("no service %s is registered", name)
		case err != nil && len(others) > 0:
			return fmt.Errorf("no answer from %s instance %q (answers came from %v)", name, instance, others)
		case err != nil:
			return fmt.Errorf("no answer from %s: %w", name, err)
		}
		var p micro.Ping
		if err := json.Unmarshal(msg.Data, &p); err != nil {
			continue
		}
		if got, ok := p.Metadata[meta.Instance]; ok && instance != "" && got != instance {
			others = append(others, got)
			continue
		}
		return nil
	}
}
