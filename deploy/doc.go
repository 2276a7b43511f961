// Package deploy is sluice's deployment kit: a Dockerfile, Kubernetes
// manifests and the same kit as a Helm chart, a hardened systemd unit, an
// Envoy configuration, Prometheus alert rules and a Grafana dashboard. It
// holds no Go code; its tests check that the files use the flags,
// environment variables, ports and paths the sluice binary really has, by
// building the binary and running it as each file says, and decode every
// manifest (and every rendering of the chart, by the real helm) strictly
// into the Kubernetes API types. deploy/README.md is the guide.
package deploy
