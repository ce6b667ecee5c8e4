package sched

// DecidePDBatch routes a batch of requests as DecidePD routes each, one at
// a time in order, booking each pair before deciding the next, with the
// time advanced and the waiting requests admitted once for the whole batch,
// as Decide does. overlaps is as Decide's. One PairDecision per request is
// appended to dst. A batch decided here and the same requests decided one
// by one with DecidePD at the same time make the same decisions when
// nothing waits in the queue (TestDecidePDBatchIsDecidePD). It does not
// allocate once the tables have grown.
func (s *Scheduler) DecidePDBatch(dst []PairDecision, batch []Request, overlaps [][]Overlap, now int64) []PairDecision {
	if overlaps != nil && len(overlaps) != len(batch) {
		panic("sched: DecidePDBatch: len(overlaps) != len(batch)")
	}
	now = s.advance(now)
	s.drain(now)
	for i := range batch {
		var ov []Overlap
		if overlaps != nil {
			ov = overlaps[i]
		}
		dst = append(dst, s.decidePD(&batch[i], ov, now, nil, nil))
	}
	s.checkInvariants()
	return dst
}
