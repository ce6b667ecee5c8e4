package epp

// LoadForTesting reads the endpoints file once, as the watcher's ticker does.
func (w *EndpointsWatcher) LoadForTesting() error { return w.load() }
