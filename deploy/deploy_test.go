//go:build e2e

package deploy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-go/sluice/internal/testing/proc"
	"github.com/sluice-go/sluice/internal/testing/testutil"
)

// sluiceBin is the sluice binary TestMain builds: static (CGO_ENABLED=0),
// as deploy/Dockerfile builds it, so that the image test can copy it.
var sluiceBin string

// kubestrictDir is the module of internal/tools/kubestrict, which decodes
// manifests strictly into the Kubernetes API types (a module of its own,
// so that k8s.io/api stays out of sluice's go.mod).
const kubestrictDir = "../internal/tools/kubestrict"

var (
	kubestrictOnce sync.Once
	kubestrictBin  string
	kubestrictErr  error
)

// kubestrict runs internal/tools/kubestrict over files, building it
// first (once, beside sluiceBin), and returns the objects it decoded, one
// "file:line: apiVersion kind namespace/name" each. It fails t with
// kubestrict's report when a document does not decode strictly into its
// API type.
func kubestrict(t *testing.T, files ...string) []string {
	t.Helper()
	kubestrictOnce.Do(func() {
		bin := filepath.Join(filepath.Dir(sluiceBin), "kubestrict")
		build := exec.Command("go", "build", "-o", bin, ".")
		build.Dir = kubestrictDir
		if out, err := build.CombinedOutput(); err != nil {
			kubestrictErr = fmt.Errorf("go build %s: %w\n%s", kubestrictDir, err, out)
			return
		}
		kubestrictBin = bin
	})
	if kubestrictErr != nil {
		t.Fatal(kubestrictErr)
	}
	out, err := kubestrictRun(files...)
	if err != nil {
		t.Fatalf("the Kubernetes API types refuse what the files say:\n%s", out)
	}
	return strings.Split(strings.TrimSpace(out), "\n")
}

// kubestrictRun runs the built kubestrict over files and returns what it
// printed.
func kubestrictRun(files ...string) (string, error) {
	cmd := exec.Command(kubestrictBin, files...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-deploy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sluiceBin = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-trimpath", "-o", sluiceBin, "../cmd/sluice")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build ./cmd/sluice: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// flagSet is what "sluice <command> --help" says the command takes: each
// flag's name, and the environment variable it is also read from.
type flagSet struct {
	env   map[string]string // flag name -> variable
	flags map[string]string // variable -> flag name
	// named are the variables the help names that are no flag's, such as
	// SLUICE_ADMIN_TOKEN: a secret, read from the environment only.
	named map[string]bool
}

var (
	helpOnce  sync.Once
	serveHelp flagSet
	helpErr   error
)

// helpFlag matches a flag's line of --help ("  -listen string"), helpEnv
// the variable its help names ("(env SLUICE_LISTEN)"), and helpVar any
// variable the help names.
var (
	helpFlag = regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)
	helpEnv  = regexp.MustCompile(`\(env (SLUICE_[A-Z0-9_]+)\)`)
	helpVar  = regexp.MustCompile(`\bSLUICE_[A-Z0-9_]*[A-Z0-9]\b`)
)

// serveFlags returns sluice serve's flags, read from its --help.
func serveFlags(t *testing.T) flagSet {
	t.Helper()
	helpOnce.Do(func() {
		out, err := exec.Command(sluiceBin, "serve", "--help").CombinedOutput()
		if err != nil {
			helpErr = fmt.Errorf("sluice serve --help: %w\n%s", err, out)
			return
		}
		serveHelp, helpErr = parseHelp(string(out))
	})
	if helpErr != nil {
		t.Fatal(helpErr)
	}
	return serveHelp
}

// parseHelp reads the flags and their variables out of a command's help:
// each flag line is followed by its help, which names the variable.
func parseHelp(help string) (flagSet, error) {
	fs := flagSet{env: map[string]string{}, flags: map[string]string{}, named: map[string]bool{}}
	locs := helpFlag.FindAllStringSubmatchIndex(help, -1)
	for i, l := range locs {
		end := len(help)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		name := help[l[2]:l[3]]
		env := helpEnv.FindStringSubmatch(help[l[1]:end])
		if env == nil {
			return fs, fmt.Errorf("--help: flag -%s names no environment variable", name)
		}
		fs.env[name] = env[1]
		fs.flags[env[1]] = name
	}
	if len(fs.env) < 5 {
		return fs, fmt.Errorf("--help lists only %d flags:\n%s", len(fs.env), help)
	}
	for _, v := range helpVar.FindAllString(help, -1) {
		if _, ok := fs.flags[v]; !ok {
			fs.named[v] = true
		}
	}
	return fs, nil
}

// checkArgs fails t for every --flag of args that fs lacks; where names
// what gave them. A flag's value may follow it or be joined with "=".
func (fs flagSet) checkArgs(t *testing.T, where string, args []string) {
	t.Helper()
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if _, ok := fs.env[name]; !ok {
			t.Errorf("%s: sluice serve has no flag --%s", where, name)
		}
	}
}

// checkEnv fails t for every variable of env that sluice serve's help
// names neither as a flag's nor in its text.
func (fs flagSet) checkEnv(t *testing.T, where string, env map[string]string) {
	t.Helper()
	if len(env) == 0 {
		t.Errorf("%s sets no SLUICE_ variable", where)
	}
	for name := range env {
		if _, ok := fs.flags[name]; !ok && !fs.named[name] {
			t.Errorf("%s: sluice serve reads no %s", where, name)
		}
	}
}

// freeAddr returns a free loopback host:port.
func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := proc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(port)
}

// process is a sluice serve the test started.
type process struct {
	cmd  *exec.Cmd
	out  *testutil.Buffer
	done chan error
}

// startSluice runs the sluice binary with args and only the environment
// env (no variable of the test's own leaks in), waits until healthz
// (a URL) answers 200, and stops the process by its pid with SIGTERM
// when t ends (SIGKILL if it has not drained within 20s).
//
// A listen address of env (from freeAddr) that another process bound
// first, between freeAddr's probe and sluice's bind, makes sluice exit
// with "bind: address already in use": startSluice then gives that
// variable a fresh address, in env itself, and starts sluice again, up to
// 5 times. Callers read their addresses from env after it returns.
func startSluice(t *testing.T, args []string, env map[string]string, healthz string) *process {
	t.Helper()
	for attempt := 1; ; attempt++ {
		p, taken := trySluice(t, args, env, healthz)
		if p != nil {
			return p
		}
		if attempt == 5 {
			t.Fatalf("sluice %s: %s was taken by another process 5 times in a row", strings.Join(args, " "), taken)
		}
		fresh := freeAddr(t)
		for k, v := range env {
			if v == taken {
				env[k] = fresh
			}
		}
		healthz = strings.Replace(healthz, taken, fresh, 1)
	}
}

// bindTaken is sluice's error for a listen address another process holds.
var bindTaken = regexp.MustCompile(`listen tcp (127\.0\.0\.1:\d+): bind: address already in use`)

// trySluice is one try of startSluice: the process, or the address that
// another process had bound first.
func trySluice(t *testing.T, args []string, env map[string]string, healthz string) (*process, string) {
	t.Helper()
	cmd := exec.Command(sluiceBin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &process{cmd: cmd, out: &testutil.Buffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() { p.stop(t) })
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case err := <-p.done:
			p.done <- err
			if m := bindTaken.FindStringSubmatch(p.out.String()); m != nil {
				return nil, m[1]
			}
			t.Fatalf("sluice %s exited before %s answered: %v\n%s", strings.Join(args, " "), healthz, err, p.out)
		default:
		}
		if code, _ := get(healthz); code == http.StatusOK {
			return p, ""
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer 200 within 15s:\n%s", healthz, p.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for the drain; it reports an exit other
// than 0 (a SIGTERM drain ends with 0).
func (p *process) stop(t *testing.T) {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Errorf("sluice after SIGTERM: %v\n%s", err, p.out)
		}
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("sluice did not exit within 20s of SIGTERM:\n%s", p.out)
	}
}

// client is the test's HTTP client: every call bounded; over HTTPS it
// verifies no certificate, as the kubelet's probes (kubeletTLS).
var client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: kubeletTLS}}

// get returns the status and body of GET url.
func get(url string) (int, string) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// getHost returns the status and body of GET url sent with Host host.
func getHost(url, host string) (int, string) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	req.Host = host
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// check posts a /v1/check of rule and key to base and returns the status
// and body.
func check(base, rule, key string) (int, string) {
	body := fmt.Sprintf(`{"rule":%q,"key":%q}`, rule, key)
	resp, err := client.Post(base+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// eventually calls f until it returns nil, failing t with its last error
// once within is over (testutil.WaitFor).
func eventually(t *testing.T, within time.Duration, f func() error) {
	t.Helper()
	testutil.WaitFor(t, within, f)
}

// grpcHealth asks the gRPC health service at addr about service.
func grpcHealth(t *testing.T, addr, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("gRPC health check of %q at %s: %v", service, addr, err)
	}
	return resp.Status
}

// run runs name with args, bounded by within, and returns its combined
// output; it fails t when the command fails.
func run(t *testing.T, within time.Duration, name string, args ...string) string {
	t.Helper()
	out, err := runErr(within, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// runErr runs name with args, bounded by within: past it the command is
// killed, and its output is given up 5s later even if a child of the
// command still holds it open.
func runErr(within time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("not done within %v: %w", within, err)
	}
	return string(out), err
}

// need returns the path of program, which make deps installs.
func need(t *testing.T, program, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(program)
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/" + program); serr == nil {
			return "/usr/sbin/" + program
		}
		t.Fatalf("%s is not installed: run make deps, which installs it, or apt-get install %s", program, pkg)
	}
	return path
}

// TestRunErrBounded: runErr returns soon after its bound even when the
// command it killed left a child holding its output open (podman's
// helpers, a shell's background job), instead of waiting for the child.
func TestRunErrBounded(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	t.Cleanup(func() {
		if raw, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(raw))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL) // the sleep the shell left, by pid
			}
		}
	})
	done := make(chan error, 1)
	go func() {
		_, err := runErr(500*time.Millisecond, "sh", "-c", `sleep 120 & echo $! > "$0"; wait`, pidFile)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not done within") {
			t.Errorf("runErr of a command past its bound: %v, want a \"not done within\" error", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("runErr did not return within 60s of its 500ms bound: it waits for the killed command's child")
	}
}

// TestStartSluiceTakenPort: a listen address another process holds when
// sluice starts is replaced by a fresh one, in env, and sluice serves
// there: the race between freeAddr's probe and sluice's bind never fails a
// test.
func TestStartSluiceTakenPort(t *testing.T) {
	p := loadKube(t).sluicePod(t)
	vol := newConfigMapVolume(t, p.cm.Data)
	env, _, _ := p.podEnv(t, vol.dir)
	held, err := net.Listen("tcp", "127.0.0.1:0") // another process's, in effect
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	taken := held.Addr().String()
	env["SLUICE_LISTEN"] = taken
	startSluice(t, p.c.Args, env, "http://"+taken+"/healthz")
	if env["SLUICE_LISTEN"] == taken {
		t.Fatalf("SLUICE_LISTEN is still %s, which another listener holds", taken)
	}
	if code, body := get("http://" + env["SLUICE_LISTEN"] + "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz at the new address %s: %d %s", env["SLUICE_LISTEN"], code, body)
	}
}
