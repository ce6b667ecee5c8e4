package wire

import (
	"errors"
	"strconv"
)

// DecodeDynamoJSON decodes a RouterEvent sent as JSON,
//
//	{"worker_id":1,"storage_tier":"device","event":{"event_id":7,"dp_rank":0,
//	 "data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":1,"tokens_hash":2}]}}}}
//
// with data also {"removed":{"block_hashes":[...]}} or "cleared", and appends
// the event to b. On error b is left unchanged. The scanner walks the bytes
// in place and allocates nothing; it validates the JSON it reads, compares
// object keys as written (a key spelled with escapes is an unknown key), and
// skips unknown keys of any depth up to 64.
func DecodeDynamoJSON(b *Batch, data []byte) error {
	m := b.mark()
	r := jsonReader{b: data}
	err := r.routerEvent(b)
	if err == nil {
		if r.ws(); r.i != len(r.b) {
			err = errTrailing
		}
	}
	if err != nil {
		b.rollback(m)
		return malformed("dynamo json at byte "+strconv.Itoa(r.i), err)
	}
	return nil
}

// DecodeDynamoAny decodes a message of a Dynamo KV-event subject in either
// of the forms Dynamo has published: a JSON RouterEvent (older Dynamo, on
// ...kv_events and, before the msgpack event plane, on ...kv-events;
// DecodeDynamoJSON) when its first non-space byte is '{', else the event
// plane's msgpack envelope (DecodeDynamo). The two cannot be confused: a
// msgpack envelope starts with a map header (0x80-0x8f, 0xde, 0xdf), never
// with '{' or white space. On error b is left unchanged.
func DecodeDynamoAny(b *Batch, msg []byte) error {
	for _, c := range msg {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '{':
			return DecodeDynamoJSON(b, msg)
		}
		break
	}
	_, err := DecodeDynamo(b, msg)
	return err
}

var (
	errJSONSyntax = errors.New("json syntax")
	errJSONDepth  = errors.New("json nested too deep")
	errJSONNumber = errors.New("json number is not a 64-bit integer")
)

const maxJSONDepth = 64

type jsonReader struct {
	b []byte
	i int
}

func (r *jsonReader) ws() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte (0 at the end) without consuming it.
func (r *jsonReader) peek() byte {
	r.ws()
	if r.i < len(r.b) {
		return r.b[r.i]
	}
	return 0
}

func (r *jsonReader) expect(c byte) error {
	if r.peek() != c {
		return errJSONSyntax
	}
	r.i++
	return nil
}

// literal consumes lit (true, false, null) if it is next.
func (r *jsonReader) literal(lit string) bool {
	if r.peek() == lit[0] && len(r.b)-r.i >= len(lit) && string(r.b[r.i:r.i+len(lit)]) == lit {
		r.i += len(lit)
		return true
	}
	return false
}

// next reads the separator before an object's next key and the key itself.
// n is how many keys were read before. It returns more == false at '}'.
func (r *jsonReader) next(n int) (key []byte, more bool, err error) {
	switch r.peek() {
	case '}':
		r.i++
		return nil, false, nil
	case ',':
		if n == 0 {
			return nil, false, errJSONSyntax
		}
		r.i++
	default:
		if n != 0 {
			return nil, false, errJSONSyntax
		}
	}
	if key, err = r.str(); err != nil {
		return nil, false, err
	}
	return key, true, r.expect(':')
}

// nextElem reads the separator before an array's next element; false at ']'.
func (r *jsonReader) nextElem(n int) (bool, error) {
	switch r.peek() {
	case ']':
		r.i++
		return false, nil
	case ',':
		if n == 0 {
			return false, errJSONSyntax
		}
		r.i++
		return true, nil
	}
	if n != 0 {
		return false, errJSONSyntax
	}
	return true, nil
}

// str reads a string and returns its raw bytes between the quotes (escapes
// are checked, not decoded).
func (r *jsonReader) str() ([]byte, error) {
	if err := r.expect('"'); err != nil {
		return nil, err
	}
	start := r.i
	for r.i < len(r.b) {
		c := r.b[r.i]
		switch {
		case c == '"':
			r.i++
			return r.b[start : r.i-1], nil
		case c == '\\':
			if r.i+1 >= len(r.b) {
				return nil, errJSONSyntax
			}
			switch r.b[r.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				r.i += 2
			case 'u':
				if len(r.b)-r.i < 6 {
					return nil, errJSONSyntax
				}
				for _, h := range r.b[r.i+2 : r.i+6] {
					if !isHex(h) {
						return nil, errJSONSyntax
					}
				}
				r.i += 6
			default:
				return nil, errJSONSyntax
			}
		case c < 0x20:
			return nil, errJSONSyntax
		default:
			r.i++
		}
	}
	return nil, errJSONSyntax
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// optStr reads a string or null (nil).
func (r *jsonReader) optStr() ([]byte, error) {
	if r.literal("null") {
		return nil, nil
	}
	s, err := r.str()
	if err == nil && s == nil {
		s = r.b[r.i-1 : r.i-1] // "" is not nil
	}
	return s, err
}

// intBits reads an integer and returns its 64 bits: 0..2^64-1 as is,
// negative values (down to -2^63) as their int64 bits.
func (r *jsonReader) intBits() (uint64, error) {
	r.ws()
	neg := r.i < len(r.b) && r.b[r.i] == '-'
	if neg {
		r.i++
	}
	start := r.i
	var v uint64
	for r.i < len(r.b) && '0' <= r.b[r.i] && r.b[r.i] <= '9' {
		d := uint64(r.b[r.i] - '0')
		if v > (1<<64-1-d)/10 {
			return 0, errJSONNumber
		}
		v = v*10 + d
		r.i++
	}
	digits := r.i - start
	if digits == 0 || digits > 1 && r.b[start] == '0' {
		return 0, errJSONSyntax
	}
	if r.i < len(r.b) {
		switch r.b[r.i] {
		case '.', 'e', 'E':
			return 0, errJSONNumber
		}
	}
	if neg {
		if v > 1<<63 {
			return 0, errJSONNumber
		}
		return -v, nil
	}
	return v, nil
}

// uint reads a non-negative integer.
func (r *jsonReader) uint() (uint64, error) {
	if r.peek() == '-' {
		return 0, errNegative
	}
	return r.intBits()
}

// skip reads and discards one value.
func (r *jsonReader) skip(depth int) error {
	if depth > maxJSONDepth {
		return errJSONDepth
	}
	switch c := r.peek(); {
	case c == '{':
		r.i++
		for n := 0; ; n++ {
			_, more, err := r.next(n)
			if err != nil || !more {
				return err
			}
			if err = r.skip(depth + 1); err != nil {
				return err
			}
		}
	case c == '[':
		r.i++
		for n := 0; ; n++ {
			more, err := r.nextElem(n)
			if err != nil || !more {
				return err
			}
			if err = r.skip(depth + 1); err != nil {
				return err
			}
		}
	case c == '"':
		_, err := r.str()
		return err
	case c == '-' || '0' <= c && c <= '9':
		return r.number()
	case r.literal("true"), r.literal("false"), r.literal("null"):
		return nil
	}
	return errJSONSyntax
}

// number skips a JSON number: -?int(.digits)?([eE][+-]?digits)?
func (r *jsonReader) number() error {
	if r.b[r.i] == '-' {
		r.i++
	}
	digits := func() int {
		s := r.i
		for r.i < len(r.b) && '0' <= r.b[r.i] && r.b[r.i] <= '9' {
			r.i++
		}
		return r.i - s
	}
	start := r.i
	if n := digits(); n == 0 || n > 1 && r.b[start] == '0' {
		return errJSONSyntax
	}
	if r.i < len(r.b) && r.b[r.i] == '.' {
		r.i++
		if digits() == 0 {
			return errJSONSyntax
		}
	}
	if r.i < len(r.b) && (r.b[r.i] == 'e' || r.b[r.i] == 'E') {
		r.i++
		if r.i < len(r.b) && (r.b[r.i] == '+' || r.b[r.i] == '-') {
			r.i++
		}
		if digits() == 0 {
			return errJSONSyntax
		}
	}
	return nil
}

func (r *jsonReader) routerEvent(b *Batch) error {
	if err := r.expect('{'); err != nil {
		return err
	}
	var ev Event
	var tier []byte
	var worker uint64
	var dp uint32
	res := rejected
	for n := 0; ; n++ {
		key, more, err := r.next(n)
		if err != nil {
			return err
		}
		if !more {
			break
		}
		switch string(key) {
		case "worker_id":
			worker, err = r.intBits()
		case "storage_tier":
			tier, err = r.optStr()
		case "event":
			if res != rejected {
				return errors.New("two events")
			}
			res, dp, err = r.kvCacheEvent(b, &ev)
		default:
			err = r.skip(1)
		}
		if err != nil {
			return err
		}
	}
	switch res {
	case rejected:
		return errors.New("RouterEvent without event")
	case ignored:
		b.Ignored++
		return nil
	}
	ev.Worker = WorkerKey{Worker: worker, Dp: dp}
	ev.Tier = tierOf(tier)
	b.Events = append(b.Events, ev)
	return nil
}

func (r *jsonReader) kvCacheEvent(b *Batch, ev *Event) (outcome, uint32, error) {
	if err := r.expect('{'); err != nil {
		return rejected, 0, err
	}
	var dp uint64
	res := rejected
	for n := 0; ; n++ {
		key, more, err := r.next(n)
		if err != nil {
			return rejected, 0, err
		}
		if !more {
			break
		}
		switch string(key) {
		case "event_id":
			ev.ID, err = r.uint()
		case "dp_rank":
			if dp, err = r.uint(); err == nil && dp > 1<<32-1 {
				err = errTooLarge
			}
		case "data":
			if res != rejected {
				return rejected, 0, errors.New("two data")
			}
			res, err = r.kvData(b, ev)
		default:
			err = r.skip(2)
		}
		if err != nil {
			return rejected, 0, err
		}
	}
	if res == rejected {
		return rejected, 0, errors.New("event without data")
	}
	return res, uint32(dp), nil
}

func (r *jsonReader) kvData(b *Batch, ev *Event) (outcome, error) {
	if r.peek() == '"' {
		tag, err := r.str()
		if err != nil {
			return rejected, err
		}
		if equalFold(tag, "cleared") {
			ev.Kind = KindCleared
			return accepted, nil
		}
		return ignored, nil
	}
	if err := r.expect('{'); err != nil {
		return rejected, err
	}
	tag, more, err := r.next(0)
	if err != nil {
		return rejected, err
	}
	if !more {
		return rejected, errors.New("data object without a variant")
	}
	res := accepted
	switch {
	case equalFold(tag, "stored"):
		ev.Kind = KindStored
		err = r.stored(b, ev)
	case equalFold(tag, "removed"):
		ev.Kind = KindRemoved
		err = r.removed(b, ev)
	case equalFold(tag, "cleared"):
		ev.Kind = KindCleared
		err = r.skip(3)
	default:
		res, err = ignored, r.skip(3)
	}
	if err != nil {
		return rejected, err
	}
	if err = r.expect('}'); err != nil { // exactly one variant
		return rejected, err
	}
	return res, nil
}

func (r *jsonReader) stored(b *Batch, ev *Event) error {
	if err := r.expect('{'); err != nil {
		return err
	}
	gotBlocks := false
	for n := 0; ; n++ {
		key, more, err := r.next(n)
		if err != nil {
			return err
		}
		if !more {
			break
		}
		switch string(key) {
		case "parent_hash":
			if !r.literal("null") {
				var p uint64
				p, err = r.intBits()
				ev.HasParent, ev.Parent = true, EngineHash(p)
			}
		case "blocks":
			if gotBlocks {
				return errors.New("blocks twice")
			}
			gotBlocks = true
			err = r.storedBlocks(b, ev)
		default:
			err = r.skip(4)
		}
		if err != nil {
			return err
		}
	}
	if !gotBlocks {
		return errors.New("stored without blocks")
	}
	return nil
}

func (r *jsonReader) storedBlocks(b *Batch, ev *Event) error {
	if err := r.expect('['); err != nil {
		return err
	}
	at := len(b.blocks)
	for n := 0; ; n++ {
		more, err := r.nextElem(n)
		if err != nil {
			return err
		}
		if !more {
			break
		}
		if err = r.expect('{'); err != nil {
			return err
		}
		var bl Block
		var seen uint8
		for k := 0; ; k++ {
			key, more, err := r.next(k)
			if err != nil {
				return err
			}
			if !more {
				break
			}
			var v uint64
			switch string(key) {
			case "block_hash":
				v, err = r.intBits()
				bl.Engine, seen = EngineHash(v), seen|1
			case "tokens_hash":
				v, err = r.intBits()
				bl.Local, seen = BlockHash(v), seen|2
			default: // mm_extra_info
				err = r.skip(5)
			}
			if err != nil {
				return err
			}
		}
		if seen != 3 {
			return errors.New("block without block_hash or tokens_hash")
		}
		b.blocks = append(b.blocks, bl)
	}
	ev.Blocks = b.blocksAt(at, len(b.blocks)-at)
	return nil
}

func (r *jsonReader) removed(b *Batch, ev *Event) error {
	if err := r.expect('{'); err != nil {
		return err
	}
	got := false
	for n := 0; ; n++ {
		key, more, err := r.next(n)
		if err != nil {
			return err
		}
		if !more {
			break
		}
		if string(key) != "block_hashes" {
			if err = r.skip(4); err != nil {
				return err
			}
			continue
		}
		if got {
			return errors.New("block_hashes twice")
		}
		got = true
		if err = r.expect('['); err != nil {
			return err
		}
		at := len(b.blocks)
		for k := 0; ; k++ {
			more, err := r.nextElem(k)
			if err != nil {
				return err
			}
			if !more {
				break
			}
			v, err := r.intBits()
			if err != nil {
				return err
			}
			b.blocks = append(b.blocks, Block{Engine: EngineHash(v)})
		}
		ev.Blocks = b.blocksAt(at, len(b.blocks)-at)
	}
	if !got {
		return errors.New("removed without block_hashes")
	}
	return nil
}

// AppendDynamoJSON appends ev as a JSON RouterEvent (the form
// DecodeDynamoJSON reads) to dst.
func AppendDynamoJSON(dst []byte, ev *Event) []byte {
	dst = append(dst, `{"worker_id":`...)
	dst = strconv.AppendUint(dst, ev.Worker.Worker, 10)
	dst = append(dst, `,"storage_tier":"`...)
	dst = append(dst, ev.Tier.String()...)
	dst = append(dst, `","event":{"event_id":`...)
	dst = strconv.AppendUint(dst, ev.ID, 10)
	dst = append(dst, `,"data":`...)
	switch ev.Kind {
	case KindStored:
		dst = append(dst, `{"stored":{"parent_hash":`...)
		if ev.HasParent {
			dst = strconv.AppendUint(dst, uint64(ev.Parent), 10)
		} else {
			dst = append(dst, "null"...)
		}
		dst = append(dst, `,"blocks":[`...)
		for i, bl := range ev.Blocks {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"block_hash":`...)
			dst = strconv.AppendUint(dst, uint64(bl.Engine), 10)
			dst = append(dst, `,"tokens_hash":`...)
			dst = strconv.AppendUint(dst, uint64(bl.Local), 10)
			dst = append(dst, `,"mm_extra_info":null}`...)
		}
		dst = append(dst, "]}}"...)
	case KindRemoved:
		dst = append(dst, `{"removed":{"block_hashes":[`...)
		for i, bl := range ev.Blocks {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendUint(dst, uint64(bl.Engine), 10)
		}
		dst = append(dst, "]}}"...)
	default:
		dst = append(dst, `"cleared"`...)
	}
	dst = append(dst, `,"dp_rank":`...)
	dst = strconv.AppendUint(dst, uint64(ev.Worker.Dp), 10)
	return append(dst, "}}"...)
}
