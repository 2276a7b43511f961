// Command sluice is the rate limiter as a program: it validates policy
// files, serves decisions over HTTP and Envoy's gRPC rate-limit API, and
// runs as a rate-limiting reverse proxy, shows what it decides on a live
// dashboard and lets an operator look at, reset and rank clients; its demo
// shows why the count belongs in Redis.
//
//	sluice check --config sluice.yaml   # validate a policy file, print the effective rules
//	sluice check --config ratelimit/    # validate envoyproxy/ratelimit files, print their limits
//	sluice serve --config sluice.yaml   # POST /v1/check and the dashboard on 127.0.0.1:8080; reloads the file on change or SIGHUP
//	sluice serve --config ratelimit/    # Envoy's rate limit service on 127.0.0.1:8081, every domain of the directory
//	sluice proxy --upstream http://127.0.0.1:3000 --config sluice.yaml   # on 127.0.0.1:8082
//	sluice serve --config sluice.yaml --tls-cert cert.pem --tls-key key.pem   # every listener on TLS (--tls-client-ca: mutual), reloaded on change
//	sluice inspect --rule login --key 203.0.113.7   # a client's state under a rule of a running serve, spending nothing
//	sluice reset --rule login --key 203.0.113.7     # forget it (SLUICE_ADMIN_TOKEN)
//	sluice top                          # the most limited keys of a running serve
//	sluice demo                         # 3 replicas: 3 x the limit in memory, exactly the limit with Redis
//	sluice version
//
// Run "sluice help" or "sluice <command> --help" for the flags; every flag
// has an environment variable equivalent (--config and SLUICE_CONFIG).
//
// Getting started is docs/getting-started.md (https://github.com/sluice-go/sluice/blob/main/docs/getting-started.md).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
