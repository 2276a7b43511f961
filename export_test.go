package sluice

// Unsupported is unsupported for the external tests: embedded in a test
// store that implements Take and Reset, it fails the other methods of
// Store with errors.ErrUnsupported.
type Unsupported = unsupported
