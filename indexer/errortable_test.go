package indexer

import (
	"testing"

	"github.com/kvroute/kvroute/internal/httpref/httpreftest"
)

// TestErrorTable: the error table lists every HTTP error status the
// indexer's code writes, and nothing it never writes.
func TestErrorTable(t *testing.T) {
	httpreftest.CheckErrorTable(t, errorTable, "../wire/openai/response.go", httpreftest.GoFiles(t, ".", "api.go")...)
}
