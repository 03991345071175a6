// Package meta names the keys of the metadata weir's services register
// with NATS micro: which pipeline, operator and instance a service is, the
// fingerprint of the contract it runs, and a coordinator's lease holder and
// memory. Package status writes and reads registrations with them
// (status.InstanceMetadata, status.CoordinatorMetadata, Gather); this leaf
// package holds only the names, so that the container healthcheck reads a
// registration without linking what status depends on.
package meta

const (
	Pipeline = "pipeline"
	Operator = "operator"
	Instance = "instance"
	// Contract is the fingerprint of the contract an instance runs.
	Contract = "contract"
	// Holder is the coordinator's lease holder.
	Holder = "holder"
	// Memory is the resident memory, in bytes, a coordinator declares.
	Memory = "memory"
)
