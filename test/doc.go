// Package test holds weir's end-to-end tests: real services on a real
// embedded JetStream, restarted and killed as they would be in production.
package test
