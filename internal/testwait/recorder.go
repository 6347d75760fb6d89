package testwait

import (
	"fmt"
	"testing"
)

// Recorder is a testing.TB whose Errorf and Fatalf record the message
// instead of failing the test (Fatalf returns), so that a test can see
// what a helper's failure says.
type Recorder struct {
	testing.TB
	Message string // what the last Errorf or Fatalf said
}

// Helper does nothing: the recorder is not the test.
func (r *Recorder) Helper() {}

// Errorf records the message.
func (r *Recorder) Errorf(format string, args ...any) { r.Message = fmt.Sprintf(format, args...) }

// Fatalf records the message and returns.
func (r *Recorder) Fatalf(format string, args ...any) { r.Message = fmt.Sprintf(format, args...) }
