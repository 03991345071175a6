package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/weirflow/weir/internal/cli"
	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/provision"
)

const provisionUsage = "usage: weir provision -contract FILE[,FILE…|shipped] [-replicas N] [-generations G,…] [-accounts | -ingress] (run with the pipeline administrator's credentials; with -ingress, the ingress account's)\n"

// provisionCmd is `weir provision`: as the pipelines' administrator, every
// stream, bucket and durable consumer their processes use, created or
// brought to the contracts (package provision). The runtime processes
// create and change none, and refuse to start on one that differs.
func provisionCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("weir provision", getenv)
	var srv natsServer
	var contract, generations string
	var o provision.Options
	fs.String(&srv.url, "nats", "NATS_URL", nats.DefaultURL, "NATS server URL")
	srv.auth.Flags(fs)
	fs.String(&contract, "contract", "WEIR_CONTRACT", "", "the pipelines' contracts, comma-separated: files or shipped contracts' names (shipped: all of them)")
	fs.Int(&o.Replicas, "replicas", "WEIR_REPLICAS", 1, "replicas of every stream and bucket, 1 to 5: the processes run with the same -replicas")
	fs.String(&generations, "generations", "WEIR_AUTH_GENERATIONS", "", "result generations, comma-separated, whose streams and buckets to bring to the contracts too (as weir auth -generations): a replay or shadow makes its generation itself, and refuses one that exists, so name one here once made — before its services run on it after weir cutover")
	fs.Bool(&o.Accounts, "accounts", "WEIR_PROVISION_ACCOUNTS", false, "the deployment has an account per pipeline, as weir auth writes it: provision the pipeline's own account, its ingress a mirror of the ingress account's stream (which -ingress provisions)")
	fs.Bool(&o.Ingress, "ingress", "WEIR_PROVISION_INGRESS", false, "provision only the ingress streams of the contracts and the consumers feeding each pipeline's mirror, as the ingress account's administrator (ingress-<stream>-admin)")
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	if contract == "" || fs.NArg() > 0 || o.Replicas < 1 || o.Replicas > 5 {
		return cli.UsageOf(provisionUsage, nil, stdout, stderr)
	}
	if generations != "" {
		o.Generations = strings.Split(generations, ",")
	}
	cs, err := loadContracts(contract)
	if err != nil {
		return err
	}
	plan, err := provision.PlanFor(cs, o)
	if err != nil {
		return err
	}
	nc, js, err := srv.connect(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	counts := map[string]int{}
	err = provision.Run(ctx, js, plan, func(out jsapi.Outcome) {
		counts[out.Action]++
		fmt.Fprintln(stdout, out)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d created, %d updated, %d as declared, %d kept as they are\n",
		counts[jsapi.Created], counts[jsapi.Updated], counts[jsapi.AsDeclared], counts[jsapi.Kept])
	return nil
}
