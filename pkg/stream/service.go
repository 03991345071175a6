package stream

import (
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/micro"

	"github.com/weirflow/weir/pkg/status"
)

// register announces the instance to the nats.go micro framework, so that
// $SRV.PING, $SRV.INFO and $SRV.STATS find it, with a status endpoint that
// answers its Stats as JSON.
func (rn *run) register() (micro.Service, error) {
	version := rn.cfg.Version
	if version == "" {
		version = "0.0.0"
	}
	svc, err := micro.AddService(rn.nc, micro.Config{
		Name:        status.ServiceName(rn.cfg.Operator),
		Version:     version,
		Description: fmt.Sprintf("weir operator %s of pipeline %s", rn.cfg.Operator, rn.plan.pipeline),
		Metadata: map[string]string{
			"pipeline": rn.plan.pipeline,
			"operator": rn.cfg.Operator,
			"instance": rn.cfg.Instance,
			"contract": rn.plan.fingerprint,
		},
		StatsHandler: func(*micro.Endpoint) any { return rn.Stats() },
	})
	if err != nil {
		return nil, fmt.Errorf("stream: register service: %w", err)
	}
	err = svc.AddEndpoint(status.Endpoint, micro.HandlerFunc(func(req micro.Request) {
		b, _ := json.Marshal(rn.Stats())
		_ = req.Respond(b)
	}), micro.WithEndpointSubject(status.EndpointSubject(rn.plan.pipeline, rn.cfg.Operator, rn.cfg.Instance)))
	if err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("stream: register status endpoint: %w", err)
	}
	return svc, nil
}
