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
func (rt *Runtime) register() (micro.Service, error) {
	version := rt.cfg.Version
	if version == "" {
		version = "0.0.0"
	}
	svc, err := micro.AddService(rt.nc, micro.Config{
		Name:        status.ServiceName(rt.cfg.Operator),
		Version:     version,
		Description: fmt.Sprintf("weir operator %s of pipeline %s", rt.cfg.Operator, rt.plan.pipeline),
		Metadata: map[string]string{
			"pipeline": rt.plan.pipeline,
			"operator": rt.cfg.Operator,
			"instance": rt.cfg.Instance,
			"contract": rt.plan.fingerprint,
		},
		StatsHandler: func(*micro.Endpoint) any { return rt.Stats() },
	})
	if err != nil {
		return nil, fmt.Errorf("stream: register service: %w", err)
	}
	err = svc.AddEndpoint(status.Endpoint, micro.HandlerFunc(func(req micro.Request) {
		b, _ := json.Marshal(rt.Stats())
		_ = req.Respond(b)
	}), micro.WithEndpointSubject(status.EndpointSubject(rt.plan.pipeline, rt.cfg.Operator, rt.cfg.Instance)))
	if err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("stream: register status endpoint: %w", err)
	}
	return svc, nil
}
