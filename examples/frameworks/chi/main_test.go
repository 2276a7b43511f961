package main

import (
	"testing"

	"github.com/sluice-go/sluice/examples/frameworks/internal/frameworktest"
)

// TestRouter: the chi router admits exactly what the tiers admit, and
// answers as net/http under httplimit does.
func TestRouter(t *testing.T) { frameworktest.Check(t, newRouter) }

// TestRun runs the example as main does, on the in-memory store.
func TestRun(t *testing.T) { frameworktest.CheckMain(t, run) }

// TestRunRedis runs two replicas of the example on one redis-server.
func TestRunRedis(t *testing.T) { frameworktest.CheckMainRedis(t, run) }
