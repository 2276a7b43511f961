package main

// The OpenAPI document of sluice serve's HTTP API, docs/openapi.yaml, held
// to the code: it is valid OpenAPI 3 (TestOpenAPIDocument), it lists
// every route serve registers and serve serves every path it lists
// (TestOpenAPIRoutes), and the answers of a running sluice serve match it
// (TestOpenAPI, in openapi_cases_test.go), which the control in
// TestOpenAPI proves the harness can tell from wrong ones.
//
// The test lives here, not in package server, because serve's mux is
// assembled here: the decision API (server), the dashboard and operator
// API (admin), /metrics and Envoy's /json and /healthcheck; and the cases
// run the real binary, as the other tests of this package do.
//
// kin-openapi (a test dependency only) loads and validates the document
// and checks requests and responses against it (openapi3filter). It
// brings four small modules (jsonpointer, swag/jsonname, a JSON Schema
// validator and yaml v4); pb33f/libopenapi with its validator brings
// many more, and a bare JSON Schema validator would leave the OpenAPI
// part (operations, status codes, headers, security) to this file.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/service/admin"
	"github.com/sluice-go/sluice/internal/service/envoy"
	"github.com/sluice-go/sluice/internal/service/server"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
)

// openAPIPath is the document, from this package's directory.
const openAPIPath = "../../docs/openapi.yaml"

// textBodies are the media types of the document's answers that are
// text without a decoder of kin-openapi's own: read as strings.
var textBodies = []string{"text/html", "text/javascript", "text/css", "image/svg+xml", "application/openmetrics-text"}

var registerTextBodies sync.Once

// loadSpec returns the document, checked to be valid OpenAPI 3 (its
// examples against their schemas too), then closed: every object schema
// that does not say what other properties it takes takes none, so that an
// answer with a field the document does not list fails (the document
// itself leaves them open, for clients to ignore new fields).
func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	registerTextBodies.Do(func() {
		for _, mt := range textBodies {
			openapi3filter.RegisterBodyDecoder(mt, openapi3filter.PlainBodyDecoder)
		}
	})
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(openAPIPath)
	if err != nil {
		t.Fatalf("%s: %v", openAPIPath, err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("%s is not valid OpenAPI 3: %v", openAPIPath, err)
	}
	closeObjects(doc)
	return doc
}

// closeObjects sets additionalProperties: false on every object schema of
// doc with properties that says nothing of others.
func closeObjects(doc *openapi3.T) {
	seen := map[*openapi3.Schema]bool{}
	var visit func(ref *openapi3.SchemaRef)
	visit = func(ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		s := ref.Value
		seen[s] = true
		if s.Type.Is("object") && len(s.Properties) > 0 && s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil {
			s.AdditionalProperties.Has = openapi3.Ptr(false)
		}
		for _, p := range s.Properties {
			visit(p)
		}
		visit(s.Items)
		visit(s.AdditionalProperties.Schema)
		for _, refs := range []openapi3.SchemaRefs{s.AllOf, s.AnyOf, s.OneOf} {
			for _, r := range refs {
				visit(r)
			}
		}
	}
	content := func(c openapi3.Content) {
		for _, mt := range c {
			visit(mt.Schema)
		}
	}
	for _, s := range doc.Components.Schemas {
		visit(s)
	}
	for _, r := range doc.Components.Responses {
		content(r.Value.Content)
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			if op.RequestBody != nil {
				content(op.RequestBody.Value.Content)
			}
			for _, r := range op.Responses.Map() {
				content(r.Value.Content)
			}
		}
	}
}

// validationOptions are how the answers are checked: a status the
// operation does not document fails, and the admin token is there when
// the request carries a bearer token (whether it is the right one is the
// server's to say).
var validationOptions = &openapi3filter.Options{
	IncludeResponseStatus: true,
	AuthenticationFunc: func(_ context.Context, in *openapi3filter.AuthenticationInput) error {
		scheme, token, _ := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
		if !strings.EqualFold(scheme, "Bearer") || token == "" {
			return errors.New("no bearer token")
		}
		return nil
	},
}

// exchange is one request and its answer.
type exchange struct {
	method, path, query string
	header              http.Header
	reqBody             []byte
	status              int
	respHeader          http.Header
	body                []byte
}

// request returns the request of x again, its body unread.
func (x *exchange) request() *http.Request {
	target := "http://127.0.0.1" + x.path
	if x.query != "" {
		target += "?" + x.query
	}
	r, err := http.NewRequest(x.method, target, bytes.NewReader(x.reqBody))
	if err != nil {
		panic(err) // the cases' methods and paths are fixed
	}
	r.Header = x.header.Clone()
	return r
}

// specRoute returns the operation of the document for x, or an error saying
// there is none.
func specRoute(doc *openapi3.T, method, path string) (*routers.Route, error) {
	item := doc.Paths.Value(path)
	if item == nil {
		return nil, fmt.Errorf("%s is not a path of the document", path)
	}
	op := item.GetOperation(method)
	if op == nil {
		return nil, fmt.Errorf("%s %s is not an operation of the document", method, path)
	}
	return &routers.Route{Spec: doc, Path: path, PathItem: item, Method: method, Operation: op}, nil
}

// validateRequest checks x's request against its operation.
func validateRequest(doc *openapi3.T, x *exchange) error {
	rt, err := specRoute(doc, x.method, x.path)
	if err != nil {
		return err
	}
	return openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
		Request: x.request(), Route: rt, Options: validationOptions})
}

// validateResponse checks x's answer against the operation rt: its status
// is documented, its body matches the schema of its media type, and the
// headers the document requires are there and match theirs.
func validateResponse(rt *routers.Route, x *exchange) error {
	return openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: x.request(), Route: rt, Options: validationOptions},
		Status:                 x.status,
		Header:                 x.respHeader,
		Body:                   io.NopCloser(bytes.NewReader(x.body)),
		Options:                validationOptions,
	})
}

// responseRoute returns an operation that documents only the response
// name of the document's components as status, to check answers that no
// operation documents (405, 404) against it.
func responseRoute(doc *openapi3.T, name string, status int, method, path string) *routers.Route {
	resp := doc.Components.Responses[name]
	if resp == nil {
		panic("no response " + name + " in the document's components")
	}
	op := &openapi3.Operation{Responses: openapi3.NewResponses(openapi3.WithStatus(status, resp))}
	return &routers.Route{Spec: doc, Path: path, Method: method, Operation: op}
}

func TestOpenAPIDocument(t *testing.T) {
	doc := loadSpec(t)
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Errorf("openapi: %q, want 3.x", doc.OpenAPI)
	}
	// Every operation has an id, a 2xx answer, and a description of
	// each answer; a guarded one names the admin token.
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.OperationID == "" {
				t.Errorf("%s %s: no operationId", method, path)
			}
			ok := false
			for _, code := range op.Responses.Keys() {
				ok = ok || strings.HasPrefix(code, "2")
			}
			if !ok {
				t.Errorf("%s %s: no 2xx answer", method, path)
			}
			if _, guarded := op.Responses.Map()["401"]; guarded && op.Security == nil {
				t.Errorf("%s %s: a 401 answer without security", method, path)
			}
		}
	}
}

// apiRoute is a route of sluice serve: a method ("" for any) and a path.
type apiRoute struct{ method, path string }

func (r apiRoute) String() string { return strings.TrimSpace(r.method + " " + r.path) }

// parsePattern returns the route of an http.ServeMux pattern, such as
// "GET /admin/v1/stats", "/json" or "GET /{$}".
func parsePattern(p string) apiRoute {
	method, path, ok := strings.Cut(p, " ")
	if !ok {
		method, path = "", p
	}
	return apiRoute{method, strings.TrimSuffix(path, "{$}")}
}

// muxRecorder is a mux that records what is routed to it.
type muxRecorder []route

// Handle records pattern and h.
func (m *muxRecorder) Handle(pattern string, h http.Handler) { *m = append(*m, route{pattern, h}) }

// serveAPIRoutes returns the routes sluice serve registers on --listen,
// from the code that registers them: serveRoutes, and the dashboard's
// Register. A handler that lists its own routes (server.Server,
// admin.Handler: each answers any other path with a 404) counts as those.
func serveAPIRoutes(t *testing.T) []apiRoute {
	engine := policy.New(sluice.New(memory.New()), nil)
	var mux muxRecorder
	mux = append(mux, serveRoutes(metrics.New(), envoy.NewRulesService(engine), startHealth(t.Context(), func(context.Context) error { return nil }), server.New(engine))...)
	admin.New().Register(&mux)
	var out []apiRoute
	for _, r := range mux {
		patterns := []string{r.pattern}
		if lister, ok := r.handler.(interface{ Routes() []string }); ok {
			patterns = lister.Routes()
		}
		for _, p := range patterns {
			if rt := parsePattern(p); !slices.Contains(out, rt) {
				out = append(out, rt)
			}
		}
	}
	return out
}

// TestOpenAPIRoutes: every route serve registers is in the document, and
// every operation of the document is a route serve registers.
func TestOpenAPIRoutes(t *testing.T) {
	doc := loadSpec(t)
	routes := serveAPIRoutes(t)
	if len(routes) < 10 {
		t.Fatalf("only %d routes found: %v", len(routes), routes)
	}
	for _, r := range routes {
		item := doc.Paths.Value(r.path)
		switch {
		case item == nil:
			t.Errorf("serve routes %s, which the document lacks", r)
		case r.method != "" && item.GetOperation(r.method) == nil:
			t.Errorf("serve routes %s, and the document has %s only for %v", r, r.path, slices.Sorted(maps.Keys(item.Operations())))
		}
	}
	for _, path := range doc.Paths.Keys() {
		for method := range doc.Paths.Value(path).Operations() {
			if !slices.ContainsFunc(routes, func(r apiRoute) bool { return r.path == path && (r.method == "" || r.method == method) }) {
				t.Errorf("the document has %s %s, which serve does not route", method, path)
			}
		}
	}
}

// documentedMethods returns the methods the document has for path.
func documentedMethods(doc *openapi3.T, path string) []string {
	return slices.Sorted(maps.Keys(doc.Paths.Value(path).Operations()))
}
