// Package kvmodel provides a naive, strict replay model of KV event streams
// for tests: per worker, a map of cached blocks by engine hash, rebuilt only
// from Stored, Removed and Cleared events, that rejects any event an exact
// index could not apply losslessly (an id gap, an unknown parent, a block
// stored twice, a removal of an unknown block or of a block whose children
// are still cached). Comparing it with what a block manager holds checks
// that the manager's events describe its cache exactly.
package kvmodel
