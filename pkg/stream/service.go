package stream

import (
	"fmt"

	"github.com/nats-io/nats.go/micro"

	"github.com/weirflow/weir/internal/status"
)

// register announces the instance to the nats.go micro framework, so that
// $SRV.PING, $SRV.INFO and $SRV.STATS find it, with a status endpoint that
// answers its Stats as JSON.
func (rn *run) register() (micro.Service, error) {
	version := rn.rt.cfg.Version
	if version == "" {
		version = "0.0.0"
	}
	svc, err := micro.AddService(rn.conn.nc, micro.Config{
		Name:         status.ServiceName(rn.rt.cfg.Operator),
		Version:      version,
		Description:  fmt.Sprintf("weir operator %s of pipeline %s", rn.rt.cfg.Operator, rn.plan.pipeline),
		Metadata:     status.InstanceMetadata(rn.plan.pipeline, rn.rt.cfg.Operator, rn.rt.cfg.Instance, rn.plan.fingerprint),
		StatsHandler: func(*micro.Endpoint) any { return rn.rt.Stats() },
	})
	if err != nil {
		return nil, fmt.Errorf("stream: register service: %w", err)
	}
	err = svc.AddEndpoint(status.Endpoint, micro.HandlerFunc(func(req micro.Request) {
		b, err := status.EncodeStats(rn.rt.Stats())
		if err == nil {
			err = req.Respond(b)
		}
		if err != nil {
			// The asker times out and shows the instance as not responding.
			rn.rt.log.Warn("answering a status request", "err", err)
		}
	}), micro.WithEndpointSubject(status.EndpointSubject(rn.plan.pipeline, rn.rt.cfg.Operator, rn.rt.cfg.Instance)))
	if err != nil {
		// Already failing; stopping the half-registered service only
		// unsubscribes it.
		_ = svc.Stop()
		return nil, fmt.Errorf("stream: register status endpoint: %w", err)
	}
	return svc, nil
}
