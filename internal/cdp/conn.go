package cdp

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/net/websocket"
)

// Origin is the Origin the WebSocket handshakes send, which the browser
// is told to allow (--remote-allow-origins).
const Origin = "http://127.0.0.1"

// Conn is a connection to a browser's WebSocket endpoint that speaks
// commands and events as JSON, {"id", "method", "params"} out and
// {"id", "result"} or {"id", "error"} back, as the DevTools protocol and
// WebDriver BiDi both do; a message without an id is an event.
type Conn struct {
	ws      *websocket.Conn
	onEvent func(method string, params json.RawMessage)
	next    atomic.Int64

	mu      sync.Mutex
	pending map[int64]chan message
	err     error // why read stopped
	closed  chan struct{}
}

// Dial connects to the endpoint at wsURL. onEvent (nil: none) is called
// with each event, one at a time, from the goroutine that reads the
// connection: it must not block, nor Call.
func Dial(ctx context.Context, wsURL string, onEvent func(method string, params json.RawMessage)) (*Conn, error) {
	cfg, err := websocket.NewConfig(wsURL, Origin)
	if err != nil {
		return nil, err
	}
	ws, err := cfg.DialContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", wsURL, err)
	}
	c := &Conn{ws: ws, onEvent: onEvent, pending: map[int64]chan message{}, closed: make(chan struct{})}
	go c.read()
	return c, nil
}

// message is one message from the browser: a reply, or an event.
type message struct {
	ID     int64           `json:"id"`
	Method string          `json:"method"` // an event's
	Params json.RawMessage `json:"params"` // an event's
	Result json.RawMessage `json:"result"`
	// Error is the DevTools protocol's {"code", "message", "data"}, or
	// BiDi's error code (a string) beside Message.
	Error   json.RawMessage `json:"error"`
	Message string          `json:"message"`
}

// err returns the error m reports, nil when it reports none.
func (m *message) err(method string) error {
	if len(m.Error) == 0 || string(m.Error) == "null" {
		return nil
	}
	var code string
	if json.Unmarshal(m.Error, &code) == nil { // BiDi
		return fmt.Errorf("%s: %s: %s", method, code, m.Message)
	}
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    string `json:"data"`
	}
	_ = json.Unmarshal(m.Error, &e)
	return fmt.Errorf("%s: %s (%d) %s", method, e.Message, e.Code, e.Data)
}

// read hands each reply to its caller, and each event to onEvent, until
// the connection ends.
func (c *Conn) read() {
	for {
		var msg []byte
		if err := websocket.Message.Receive(c.ws, &msg); err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			close(c.closed)
			return
		}
		var m message
		if json.Unmarshal(msg, &m) != nil {
			continue
		}
		if m.ID == 0 { // an event
			if c.onEvent != nil && m.Method != "" {
				c.onEvent(m.Method, m.Params)
			}
			continue
		}
		c.mu.Lock()
		ch := c.pending[m.ID]
		delete(c.pending, m.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	}
}

// Call calls method with params and decodes its result into result (nil:
// ignored), waiting for the reply at most until ctx ends.
func (c *Conn) Call(ctx context.Context, method string, params, result any) error {
	id := c.next.Add(1)
	ch := make(chan message, 1)
	c.mu.Lock()
	c.pending[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()
	if params == nil {
		params = struct{}{}
	}
	msg, err := json.Marshal(struct {
		ID     int64  `json:"id"`
		Method string `json:"method"`
		Params any    `json:"params"`
	}{id, method, params})
	if err != nil {
		return err
	}
	if err := websocket.Message.Send(c.ws, string(msg)); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case m := <-ch:
		if err := m.err(method); err != nil {
			return err
		}
		if result != nil {
			if err := json.Unmarshal(m.Result, result); err != nil {
				return fmt.Errorf("%s: %w", method, err)
			}
		}
		return nil
	case <-c.closed:
		c.mu.Lock()
		defer c.mu.Unlock()
		return fmt.Errorf("%s: the connection to the browser ended: %w", method, c.err)
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// Close closes the connection.
func (c *Conn) Close() error { return c.ws.Close() }
