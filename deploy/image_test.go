//go:build e2e

package deploy_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// instruction is one instruction of a Dockerfile, continuation lines
// joined.
type instruction struct {
	cmd  string // upper case: FROM, COPY, ...
	args string
	line int
}

// parseDockerfile returns the instructions of the Dockerfile at file,
// comments and blank lines left out.
func parseDockerfile(t *testing.T, file string) []instruction {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var (
		out  []instruction
		cur  strings.Builder
		from int
	)
	for i, l := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(l)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() == 0 {
			from = i + 1
		}
		if strings.HasSuffix(trimmed, `\`) {
			cur.WriteString(strings.TrimSuffix(trimmed, `\`) + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{strings.ToUpper(cmd), strings.TrimSpace(args), from})
		cur.Reset()
	}
	return out
}

// execForm parses an exec-form (JSON array) ENTRYPOINT or CMD.
func execForm(t *testing.T, in instruction) []string {
	t.Helper()
	var v []string
	if err := json.Unmarshal([]byte(in.args), &v); err != nil || len(v) == 0 {
		t.Fatalf("Dockerfile:%d: %s %s: want the exec form, a JSON array (the shell form needs a shell, which the image has not)", in.line, in.cmd, in.args)
	}
	return v
}

// envPair matches one NAME=value of an ENV instruction.
var envPair = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)=("[^"]*"|\S+)`)

// image is what the Dockerfile's final stage says about the image.
type image struct {
	user       string
	env        map[string]string
	expose     []int
	entrypoint []string
	cmd        []string
	binary     string // where the final stage copies the binary
}

// finalStage reads the final stage of deploy/Dockerfile, and checks the
// build stage: a static binary, without the build machine's paths.
func finalStage(t *testing.T) image {
	t.Helper()
	ins := parseDockerfile(t, "Dockerfile")
	last := 0
	built := false
	for i, in := range ins {
		if in.cmd == "FROM" {
			last = i
		}
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			built = true
			for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "cmd/sluice"} {
				if !strings.Contains(in.args, want) {
					t.Errorf("Dockerfile:%d: the build lacks %s", in.line, want)
				}
			}
		}
	}
	if !built {
		t.Error("Dockerfile: no RUN go build")
	}
	// The golang image is at least the go.mod's Go version.
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+)\.(\d+)`).FindStringSubmatch(string(gomod))
	goImage := ""
	for _, in := range ins {
		if v, ok := strings.CutPrefix(in.args, "GO_IMAGE="); in.cmd == "ARG" && ok {
			goImage = v
		}
	}
	golang := regexp.MustCompile(`^golang:(\d+)\.(\d+)`).FindStringSubmatch(goImage)
	if goVersion == nil || golang == nil {
		t.Errorf("Dockerfile ARG GO_IMAGE=%q, go.mod's go %v: want golang:<major>.<minor>...", goImage, goVersion)
	} else if a, b := atoi(golang[1])*1000+atoi(golang[2]), atoi(goVersion[1])*1000+atoi(goVersion[2]); a < b {
		t.Errorf("Dockerfile builds with %s, older than go.mod's go %s.%s", goImage, goVersion[1], goVersion[2])
	}
	img := image{env: map[string]string{}}
	for _, in := range ins[last+1:] {
		switch in.cmd {
		case "USER":
			img.user = in.args
		case "ENV":
			for _, m := range envPair.FindAllStringSubmatch(in.args, -1) {
				img.env[m[1]] = strings.Trim(m[2], `"`)
			}
		case "EXPOSE":
			for _, p := range strings.Fields(in.args) {
				n, err := strconv.Atoi(strings.TrimSuffix(p, "/tcp"))
				if err != nil {
					t.Errorf("Dockerfile:%d: EXPOSE %s: %v", in.line, p, err)
				}
				img.expose = append(img.expose, n)
			}
		case "ENTRYPOINT":
			img.entrypoint = execForm(t, in)
		case "CMD":
			img.cmd = execForm(t, in)
		case "COPY":
			f := strings.Fields(in.args)
			img.binary = f[len(f)-1]
		}
	}
	return img
}

// atoi is strconv.Atoi of a string a regular expression matched as digits.
func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// TestDockerfile: the final stage runs the binary it copies as a numeric
// non-root user (the Deployment's runAsUser), serve by default, with only
// variables serve reads, listening on every interface on the ports it
// exposes, which are the Deployment's container ports, and reading its
// policy where the Deployment mounts the ConfigMap.
func TestDockerfile(t *testing.T) {
	img := finalStage(t)
	fs := serveFlags(t)
	p := loadKube(t).sluicePod(t)

	uid, _, _ := strings.Cut(img.user, ":")
	n, err := strconv.Atoi(uid)
	if err != nil || n == 0 {
		t.Errorf("USER %q: want a numeric user other than root (0), which runAsNonRoot can check without /etc/passwd", img.user)
	}
	if u := p.spec.SecurityContext.RunAsUser; u != nil && strconv.FormatInt(*u, 10) != uid {
		t.Errorf("USER %s, but the Deployment runs as %d", uid, *u)
	}
	if len(img.entrypoint) != 1 || img.entrypoint[0] != img.binary {
		t.Errorf("ENTRYPOINT %q, want the copied binary [%q]", img.entrypoint, img.binary)
	}
	if len(img.cmd) == 0 || img.cmd[0] != "serve" {
		t.Errorf("CMD %q: want serve", img.cmd)
	} else {
		fs.checkArgs(t, "Dockerfile CMD", img.cmd[1:])
	}
	fs.checkEnv(t, "Dockerfile ENV", img.env)
	for env, name := range map[string]string{"SLUICE_LISTEN": "http", "SLUICE_GRPC_LISTEN": "grpc"} {
		host, port, err := net.SplitHostPort(img.env[env])
		if err != nil {
			t.Errorf("ENV %s=%q: %v", env, img.env[env], err)
			continue
		}
		if host != "0.0.0.0" {
			t.Errorf("ENV %s=%q: a container must listen on every interface", env, img.env[env])
		}
		exposed := false
		for _, e := range img.expose {
			exposed = exposed || strconv.Itoa(e) == port
		}
		if !exposed {
			t.Errorf("ENV %s=%q, but EXPOSE %v lacks %s", env, img.env[env], img.expose, port)
		}
		if strconv.Itoa(p.ports[name]) != port {
			t.Errorf("ENV %s=%q, but the Deployment's %s port is %d", env, img.env[env], name, p.ports[name])
		}
	}
	if dir := path.Dir(img.env["SLUICE_CONFIG"]); dir != p.policyDir {
		t.Errorf("ENV SLUICE_CONFIG=%q, in %s; the Deployment mounts the ConfigMap at %s", img.env["SLUICE_CONFIG"], dir, p.policyDir)
	}
}

// podman runs podman with args, bounded by within.
func podman(t *testing.T, within time.Duration, args ...string) string {
	t.Helper()
	return strings.TrimSpace(run(t, within, need(t, "podman", "podman"), args...))
}

// TestImage builds deploy/Dockerfile with podman, FROM scratch around the
// binary TestMain built (BINARY=prebuilt: this machine cannot pull the
// golang and distroless images), and runs it as the Deployment runs its
// pod: its user, a read-only root file system, no capabilities, no
// privilege escalation, the ConfigMap's policy file mounted read-only at
// /etc/sluice, and nothing else given but loopback addresses for its
// listeners (the image's ENTRYPOINT, CMD and the rest of its ENV). It
// answers /healthz, /readyz, /v1/check and the gRPC health service, its
// process is not root and has no capabilities, and podman stop (SIGTERM)
// drains it to exit code 0.
func TestImage(t *testing.T) {
	need(t, "podman", "podman")
	p := loadKube(t).sluicePod(t)
	if p.spec.SecurityContext.RunAsUser == nil {
		t.Fatal("the Deployment sets no runAsUser to run the container as")
	}

	ctx := t.TempDir()
	df, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(sluiceBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctx, "Dockerfile"), df, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctx, "sluice"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("localhost/sluice-deploy-test:%d", time.Now().UnixNano())
	// The image and the images of the build's stages (each "--> <id>"
	// line of the output), removed when the test ends.
	out, err := runErr(5*time.Minute, need(t, "podman", "podman"), "build", "--build-arg", "BINARY=prebuilt", "--build-arg", "BASE=scratch", "-t", tag, ctx)
	t.Cleanup(func() {
		rm := []string{"rmi", "-f", tag}
		for _, m := range regexp.MustCompile(`(?m)^--> ([0-9a-f]{6,})$`).FindAllStringSubmatch(out, -1) {
			rm = append(rm, m[1])
		}
		_, _ = runErr(time.Minute, "podman", rm...)
	})
	if err != nil {
		t.Fatalf("podman build: %v\n%s", err, out)
	}

	policy := t.TempDir()
	if err := os.Chmod(policy, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(policy, p.policy), []byte(p.cm.Data[p.policy]), 0o644); err != nil {
		t.Fatal(err)
	}
	// The host's network, with the listeners moved to free loopback
	// ports (the image's 0.0.0.0 would listen on every interface of the
	// host): nothing leaves loopback, and no bridge or packet filter is
	// set up. TestDockerfile checks the image's own addresses.
	httpAddr, grpcAddr := freeAddr(t), freeAddr(t)
	args := []string{"run", "--detach", "--network=host",
		"--user", strconv.FormatInt(*p.spec.SecurityContext.RunAsUser, 10),
		"--read-only", "--cap-drop=ALL", "--security-opt=no-new-privileges",
		"-v", policy + ":" + p.policyDir + ":ro",
		"-e", "SLUICE_LISTEN=" + httpAddr, "-e", "SLUICE_GRPC_LISTEN=" + grpcAddr,
	}
	args = append(args, sandboxRunArgs()...)
	args = append(args, tag)
	id := podman(t, 2*time.Minute, args...)
	t.Cleanup(func() { _, _ = runErr(time.Minute, "podman", "rm", "-f", "-t", "0", id) })

	base := "http://" + httpAddr
	eventually(t, 20*time.Second, func() error {
		if code, body := get(base + p.c.LivenessProbe.HTTPGet.Path); code != http.StatusOK {
			logs, _ := runErr(time.Minute, "podman", "logs", id)
			return fmt.Errorf("the container's %s: %d %s\n%s", p.c.LivenessProbe.HTTPGet.Path, code, body, logs)
		}
		return nil
	})
	if code, body := get(base + p.c.ReadinessProbe.HTTPGet.Path); code != http.StatusOK {
		t.Errorf("the container's %s: %d %s", p.c.ReadinessProbe.HTTPGet.Path, code, body)
	}
	if code, body := check(base, "login", "203.0.113.7"); code != http.StatusOK || !strings.Contains(body, `"allowed":true`) {
		t.Errorf("the container's /v1/check: %d %s", code, body)
	}
	if st := grpcHealth(t, grpcAddr, "ratelimit"); st.String() != "SERVING" {
		t.Errorf("the container's gRPC health: %v", st)
	}
	pid := podman(t, time.Minute, "inspect", "--format", "{{.State.Pid}}", id)
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	uid := regexp.MustCompile(`(?m)^Uid:\s+(\d+)\s+(\d+)`).FindStringSubmatch(string(status))
	if want := strconv.FormatInt(*p.spec.SecurityContext.RunAsUser, 10); uid == nil || uid[1] != want || uid[2] != want {
		t.Errorf("the container's process (pid %s) runs as %q, want uid %s", pid, uid, want)
	}
	if capEff := regexp.MustCompile(`(?m)^CapEff:\s+(\S+)`).FindStringSubmatch(string(status)); capEff == nil || strings.Trim(capEff[1], "0") != "" {
		t.Errorf("the container's process has capabilities %q, want none", capEff)
	}

	podman(t, time.Minute, "stop", "-t", "20", id)
	if code := podman(t, time.Minute, "inspect", "--format", "{{.State.ExitCode}}", id); code != "0" {
		logs, _ := runErr(time.Minute, "podman", "logs", id)
		t.Errorf("after podman stop the container exited %s, want 0 (a drained SIGTERM):\n%s", code, logs)
	}
	if logs := podman(t, time.Minute, "logs", id); !strings.Contains(logs, "shutting down") {
		t.Errorf("the container's log has no drain:\n%s", logs)
	}
}

// sandboxRunArgs are podman run flags this machine needs, harmless
// elsewhere: explicit resource limits no higher than the ones podman runs
// under (podman raises them by default, which a host without
// CAP_SYS_RESOURCE refuses), and runc where it is installed (crun refuses
// the hybrid cgroup hierarchy some hosts have).
func sandboxRunArgs() []string {
	args := []string{"--ulimit", "nofile=16384:16384", "--ulimit", "nproc=4096:4096"}
	if _, err := exec.LookPath("runc"); err == nil {
		args = append(args, "--runtime", "runc")
	} else if _, err := os.Stat("/usr/sbin/runc"); err == nil {
		args = append(args, "--runtime", "/usr/sbin/runc")
	}
	return args
}
