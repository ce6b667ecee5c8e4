package replay

import (
	"bufio"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strconv"
	"strings"
)

// Plot formats.
const (
	PlotSVG = "svg"
	PlotPNG = "png"
)

// Plot draws the report as an SVG or PNG figure (format PlotSVG or
// PlotPNG): one row per speedup, with the TTFT distribution of every policy
// (CDF, log-scale TTFT) on the left and the hit ratio over the trace's time
// on the right, the achievable hit ratio dashed. speedups picks the rows
// (nil: the lowest speedup and kv's saturation speedup, when the report has
// one).
func Plot(w io.Writer, r *Report, format string, speedups []float64) error {
	if len(speedups) == 0 {
		speedups = r.defaultPlotSpeedups()
	}
	if len(speedups) == 0 {
		return fmt.Errorf("replay: nothing to plot")
	}
	f := newFigure(r, speedups)
	switch format {
	case PlotSVG:
		c := &svgCanvas{}
		f.draw(c)
		return c.write(w, f.width, f.height)
	case PlotPNG:
		c := newPNGCanvas(f.width, f.height)
		f.draw(c)
		return png.Encode(w, c.img)
	}
	return fmt.Errorf("%w: plot format %q (want svg or png)", ErrConfig, format)
}

func (r *Report) defaultPlotSpeedups() []float64 {
	if len(r.Speedups) == 0 {
		return nil
	}
	out := []float64{r.Speedups[0]}
	if st := r.Saturation; st != nil && st.KeepsUpTo > 0 && st.KeepsUpTo != out[0] {
		out = append(out, st.KeepsUpTo)
	}
	return out
}

type pt struct{ x, y float64 }

const (
	anchorStart = iota
	anchorMiddle
	anchorEnd
)

// canvas is what the figure draws on: SVG text or a PNG raster.
type canvas interface {
	polyline(pts []pt, c color.RGBA, width float64, dashed bool)
	text(x, y float64, s string, size float64, anchor int, c color.RGBA)
	rect(x, y, w, h float64, stroke color.RGBA)
}

var (
	black = color.RGBA{0, 0, 0, 255}
	grey  = color.RGBA{200, 200, 200, 255}
	dark  = color.RGBA{90, 90, 90, 255}
	// lightDark draws the fleet-sized LRU reference.
	lightDark = color.RGBA{160, 160, 160, 255}
)

// palette gives each policy a fixed colour (tab10).
var palette = map[string]color.RGBA{
	"kv":           {31, 119, 180, 255},
	"round-robin":  {255, 127, 14, 255},
	"random":       {44, 160, 44, 255},
	"least-loaded": {214, 39, 40, 255},
	"kv-approx":    {148, 103, 189, 255},
}

var spare = []color.RGBA{{140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255}, {188, 189, 34, 255}, {23, 190, 207, 255}}

type figure struct {
	r             *Report
	speedups      []float64
	policies      []string
	colors        map[string]color.RGBA
	width, height float64
}

const (
	rowHeight  = 330.0
	headHeight = 90.0
)

func newFigure(r *Report, speedups []float64) *figure {
	f := &figure{r: r, speedups: speedups, colors: map[string]color.RGBA{}, width: 1040}
	for _, p := range r.Policies {
		if !contains(f.policies, p.Policy) {
			f.policies = append(f.policies, p.Policy)
			c, ok := palette[p.Policy]
			if !ok {
				c = spare[(len(f.policies)-1)%len(spare)]
			}
			f.colors[p.Policy] = c
		}
	}
	f.height = headHeight + rowHeight*float64(len(speedups))
	return f
}

func (f *figure) draw(c canvas) {
	r := f.r
	title := fmt.Sprintf("kvroute replay: %s, %d requests, %d workers (%s)", baseName(r.Trace), r.Requests, r.Workers, r.Mode)
	c.text(f.width/2, 22, title, 15, anchorMiddle, black)
	x := 80.0
	for _, p := range f.policies {
		c.polyline([]pt{{x, 46}, {x + 26, 46}}, f.colors[p], 3, false)
		c.text(x+32, 51, p, 13, anchorStart, black)
		x += 48 + 8*float64(len(p))
	}
	x = 80
	c.polyline([]pt{{x, 68}, {x + 26, 68}}, dark, 2, true)
	c.text(x+32, 73, "achievable (infinite shared cache)", 13, anchorStart, black)
	if len(r.FleetCacheOverTime) > 0 {
		x += 48 + 8*34
		c.polyline([]pt{{x, 68}, {x + 26, 68}}, lightDark, 2, true)
		c.text(x+32, 73, "one LRU cache the size of the fleet's (capacity reference)", 13, anchorStart, black)
	}
	for i, s := range f.speedups {
		top := headHeight + rowHeight*float64(i)
		f.drawTTFT(c, s, 70, top+30, 420, rowHeight-95)
		f.drawHit(c, s, 590, top+30, 420, rowHeight-95)
	}
}

// drawTTFT draws the TTFT CDFs of one speedup in the box (x, y, w, h).
func (f *figure) drawTTFT(c canvas, s float64, x, y, w, h float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range f.r.Policies {
		if p.Speedup == s && len(p.ttft) > 0 {
			lo = min(lo, max(p.ttft[0], 0.1))
			hi = max(hi, p.ttft[len(p.ttft)-1])
		}
	}
	c.text(x+w/2, y-10, fmt.Sprintf("TTFT distribution at %gx speedup", s), 14, anchorMiddle, black)
	c.rect(x, y, w, h, black)
	if math.IsInf(lo, 1) {
		c.text(x+w/2, y+h/2, "no completed request", 12, anchorMiddle, dark)
		return
	}
	l0, l1 := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if l1 <= l0 {
		l1 = l0 + 1
	}
	px := func(v float64) float64 { return x + w*(math.Log10(max(v, 0.1))-l0)/(l1-l0) }
	py := func(q float64) float64 { return y + h*(1-q) }
	for e := l0; e <= l1; e++ {
		xx := px(math.Pow(10, e))
		c.polyline([]pt{{xx, y}, {xx, y + h}}, grey, 1, false)
		c.text(xx, y+h+16, msLabel(math.Pow(10, e)), 11, anchorMiddle, black)
	}
	for q := 0.0; q <= 1.0001; q += 0.25 {
		yy := py(q)
		c.polyline([]pt{{x, yy}, {x + w, yy}}, grey, 1, false)
		c.text(x-6, yy+4, strconv.FormatFloat(q, 'f', 2, 64), 11, anchorEnd, black)
	}
	c.text(x+w/2, y+h+34, "time to first token (log scale)", 12, anchorMiddle, black)
	c.text(x-48, y+h/2, "CDF", 12, anchorMiddle, black)
	for _, p := range f.r.Policies {
		if p.Speedup != s || len(p.ttft) == 0 {
			continue
		}
		n := len(p.ttft)
		step := max(1, n/400)
		var pts []pt
		for i := 0; i < n; i += step {
			pts = append(pts, pt{px(p.ttft[i]), py(float64(i+1) / float64(n))})
		}
		pts = append(pts, pt{px(p.ttft[n-1]), py(1)})
		c.polyline(pts, f.colors[p.Policy], 2, false)
	}
}

// drawHit draws the hit ratio over time of one speedup in the box.
func (f *figure) drawHit(c canvas, s float64, x, y, w, h float64) {
	span := f.r.SpanS / 60
	c.text(x+w/2, y-10, fmt.Sprintf("prefix-cache hit ratio over the trace at %gx", s), 14, anchorMiddle, black)
	c.rect(x, y, w, h, black)
	px := func(b float64) float64 { return x + w*b/Buckets }
	py := func(v float64) float64 { return y + h*(1-v) }
	for v := 0.0; v <= 1.0001; v += 0.25 {
		yy := py(v)
		c.polyline([]pt{{x, yy}, {x + w, yy}}, grey, 1, false)
		c.text(x-6, yy+4, strconv.FormatFloat(v, 'f', 2, 64), 11, anchorEnd, black)
	}
	for k := 0; k <= 4; k++ {
		xx := x + w*float64(k)/4
		c.text(xx, y+h+16, strconv.FormatFloat(span*float64(k)/4, 'f', 1, 64), 11, anchorMiddle, black)
	}
	c.text(x+w/2, y+h+34, "arrival time in the trace (minutes, before speedup)", 12, anchorMiddle, black)
	c.text(x-48, y+h/2, "hit", 12, anchorMiddle, black)
	series := func(v []float64) []pt {
		var pts []pt
		for i, r := range v {
			if r >= 0 {
				pts = append(pts, pt{px(float64(i) + 0.5), py(r)})
			}
		}
		return pts
	}
	c.polyline(series(f.r.AchievableOverTime), dark, 2, true)
	if len(f.r.FleetCacheOverTime) > 0 {
		c.polyline(series(f.r.FleetCacheOverTime), lightDark, 2, true)
	}
	for _, p := range f.r.Policies {
		if p.Speedup == s {
			c.polyline(series(p.HitOverTime), f.colors[p.Policy], 2, false)
		}
	}
}

func msLabel(v float64) string {
	switch {
	case v >= 1000:
		return strconv.FormatFloat(v/1000, 'g', 4, 64) + "s"
	}
	return strconv.FormatFloat(v, 'g', 4, 64) + "ms"
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// svgCanvas accumulates SVG elements.
type svgCanvas struct{ b strings.Builder }

func svgColor(c color.RGBA) string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }

func (s *svgCanvas) polyline(pts []pt, c color.RGBA, width float64, dashed bool) {
	if len(pts) < 2 {
		return
	}
	s.b.WriteString(`<polyline fill="none" stroke="`)
	s.b.WriteString(svgColor(c))
	fmt.Fprintf(&s.b, `" stroke-width="%g"`, width)
	if dashed {
		s.b.WriteString(` stroke-dasharray="6,4"`)
	}
	s.b.WriteString(` points="`)
	for i, p := range pts {
		if i > 0 {
			s.b.WriteByte(' ')
		}
		fmt.Fprintf(&s.b, "%.1f,%.1f", p.x, p.y)
	}
	s.b.WriteString("\"/>\n")
}

func (s *svgCanvas) text(x, y float64, t string, size float64, anchor int, c color.RGBA) {
	a := [...]string{"start", "middle", "end"}[anchor]
	fmt.Fprintf(&s.b, `<text x="%.1f" y="%.1f" font-size="%g" text-anchor="%s" fill="%s">`, x, y, size, a, svgColor(c))
	s.b.WriteString(strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(t))
	s.b.WriteString("</text>\n")
}

func (s *svgCanvas) rect(x, y, w, h float64, stroke color.RGBA) {
	fmt.Fprintf(&s.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="%s"/>`+"\n", x, y, w, h, svgColor(stroke))
}

func (s *svgCanvas) write(w io.Writer, width, height float64) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="Helvetica, Arial, sans-serif">`+"\n", width, height, width, height)
	fmt.Fprintf(bw, `<rect width="%.0f" height="%.0f" fill="white"/>`+"\n", width, height)
	bw.WriteString(s.b.String())
	bw.WriteString("</svg>\n")
	return bw.Flush()
}

// pngCanvas rasterizes onto an RGBA image with a built-in 5×7 font
// (upper and lower case, digits and the figures' symbols).
type pngCanvas struct{ img *image.RGBA }

func newPNGCanvas(w, h float64) *pngCanvas {
	img := image.NewRGBA(image.Rect(0, 0, int(w), int(h)))
	for i := range img.Pix {
		img.Pix[i] = 255
	}
	return &pngCanvas{img: img}
}

func (p *pngCanvas) dot(x, y int, c color.RGBA, r int) {
	for dy := -r; dy <= r; dy++ {
		for dx := -r; dx <= r; dx++ {
			if image.Pt(x+dx, y+dy).In(p.img.Rect) {
				p.img.SetRGBA(x+dx, y+dy, c)
			}
		}
	}
}

func (p *pngCanvas) polyline(pts []pt, c color.RGBA, width float64, dashed bool) {
	r := int(width / 2)
	walked := 0.0
	for i := 1; i < len(pts); i++ {
		a, b := pts[i-1], pts[i]
		n := int(math.Max(math.Abs(b.x-a.x), math.Abs(b.y-a.y))) + 1
		seg := math.Hypot(b.x-a.x, b.y-a.y)
		for k := 0; k <= n; k++ {
			t := float64(k) / float64(n)
			if dashed && math.Mod(walked+t*seg, 10) >= 6 {
				continue
			}
			p.dot(int(math.Round(a.x+t*(b.x-a.x))), int(math.Round(a.y+t*(b.y-a.y))), c, r)
		}
		walked += seg
	}
}

func (p *pngCanvas) rect(x, y, w, h float64, stroke color.RGBA) {
	p.polyline([]pt{{x, y}, {x + w, y}, {x + w, y + h}, {x, y + h}, {x, y}}, stroke, 1, false)
}

// text draws s in the 5×7 font, scaled to about size pixels per line.
func (p *pngCanvas) text(x, y float64, s string, size float64, anchor int, c color.RGBA) {
	scale := 1
	if size >= 15 {
		scale = 2
	}
	adv := 6 * scale
	width := adv * len([]rune(s))
	x0 := int(x)
	switch anchor {
	case anchorMiddle:
		x0 -= width / 2
	case anchorEnd:
		x0 -= width
	}
	y0 := int(y) - 7*scale
	for i, ch := range []rune(s) {
		g := glyph(ch)
		for row := range 7 {
			for col := range 5 {
				if g[row]&(1<<(4-col)) == 0 {
					continue
				}
				for sy := range scale {
					for sx := range scale {
						px, py := x0+i*adv+col*scale+sx, y0+row*scale+sy
						if image.Pt(px, py).In(p.img.Rect) {
							p.img.SetRGBA(px, py, c)
						}
					}
				}
			}
		}
	}
}

// glyph returns the 5×7 bitmap of r (rows top to bottom, bit 4 leftmost);
// a rune the font lacks is drawn as '?'.
func glyph(r rune) [7]uint8 {
	if g, ok := font5x7[r]; ok {
		return g
	}
	return font5x7['?']
}

var font5x7 = map[rune][7]uint8{
	' ':  {},
	'A':  {0b01110, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001},
	'B':  {0b11110, 0b10001, 0b10001, 0b11110, 0b10001, 0b10001, 0b11110},
	'C':  {0b01110, 0b10001, 0b10000, 0b10000, 0b10000, 0b10001, 0b01110},
	'D':  {0b11110, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b11110},
	'E':  {0b11111, 0b10000, 0b10000, 0b11110, 0b10000, 0b10000, 0b11111},
	'F':  {0b11111, 0b10000, 0b10000, 0b11110, 0b10000, 0b10000, 0b10000},
	'G':  {0b01110, 0b10001, 0b10000, 0b10111, 0b10001, 0b10001, 0b01111},
	'H':  {0b10001, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001},
	'I':  {0b01110, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110},
	'J':  {0b00111, 0b00010, 0b00010, 0b00010, 0b00010, 0b10010, 0b01100},
	'K':  {0b10001, 0b10010, 0b10100, 0b11000, 0b10100, 0b10010, 0b10001},
	'L':  {0b10000, 0b10000, 0b10000, 0b10000, 0b10000, 0b10000, 0b11111},
	'M':  {0b10001, 0b11011, 0b10101, 0b10101, 0b10001, 0b10001, 0b10001},
	'N':  {0b10001, 0b10001, 0b11001, 0b10101, 0b10011, 0b10001, 0b10001},
	'O':  {0b01110, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01110},
	'P':  {0b11110, 0b10001, 0b10001, 0b11110, 0b10000, 0b10000, 0b10000},
	'Q':  {0b01110, 0b10001, 0b10001, 0b10001, 0b10101, 0b10010, 0b01101},
	'R':  {0b11110, 0b10001, 0b10001, 0b11110, 0b10100, 0b10010, 0b10001},
	'S':  {0b01111, 0b10000, 0b10000, 0b01110, 0b00001, 0b00001, 0b11110},
	'T':  {0b11111, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100},
	'U':  {0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01110},
	'V':  {0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01010, 0b00100},
	'W':  {0b10001, 0b10001, 0b10001, 0b10101, 0b10101, 0b10101, 0b01010},
	'X':  {0b10001, 0b10001, 0b01010, 0b00100, 0b01010, 0b10001, 0b10001},
	'Y':  {0b10001, 0b10001, 0b10001, 0b01010, 0b00100, 0b00100, 0b00100},
	'Z':  {0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b10000, 0b11111},
	'0':  {0b01110, 0b10001, 0b10011, 0b10101, 0b11001, 0b10001, 0b01110},
	'1':  {0b00100, 0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110},
	'2':  {0b01110, 0b10001, 0b00001, 0b00010, 0b00100, 0b01000, 0b11111},
	'3':  {0b11111, 0b00010, 0b00100, 0b00010, 0b00001, 0b10001, 0b01110},
	'4':  {0b00010, 0b00110, 0b01010, 0b10010, 0b11111, 0b00010, 0b00010},
	'5':  {0b11111, 0b10000, 0b11110, 0b00001, 0b00001, 0b10001, 0b01110},
	'6':  {0b00110, 0b01000, 0b10000, 0b11110, 0b10001, 0b10001, 0b01110},
	'7':  {0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b01000, 0b01000},
	'8':  {0b01110, 0b10001, 0b10001, 0b01110, 0b10001, 0b10001, 0b01110},
	'9':  {0b01110, 0b10001, 0b10001, 0b01111, 0b00001, 0b00010, 0b01100},
	'.':  {0, 0, 0, 0, 0, 0b01100, 0b01100},
	',':  {0, 0, 0, 0, 0b01100, 0b00100, 0b01000},
	'-':  {0, 0, 0, 0b11111, 0, 0, 0},
	'_':  {0, 0, 0, 0, 0, 0, 0b11111},
	':':  {0, 0b01100, 0b01100, 0, 0b01100, 0b01100, 0},
	'/':  {0, 0b00001, 0b00010, 0b00100, 0b01000, 0b10000, 0},
	'(':  {0b00010, 0b00100, 0b01000, 0b01000, 0b01000, 0b00100, 0b00010},
	')':  {0b01000, 0b00100, 0b00010, 0b00010, 0b00010, 0b00100, 0b01000},
	'%':  {0b11000, 0b11001, 0b00010, 0b00100, 0b01000, 0b10011, 0b00011},
	'=':  {0, 0, 0b11111, 0, 0b11111, 0, 0},
	'+':  {0, 0b00100, 0b00100, 0b11111, 0b00100, 0b00100, 0},
	'>':  {0b01000, 0b00100, 0b00010, 0b00001, 0b00010, 0b00100, 0b01000},
	'<':  {0b00010, 0b00100, 0b01000, 0b10000, 0b01000, 0b00100, 0b00010},
	'\'': {0b00100, 0b00100, 0b01000, 0, 0, 0, 0},
	'?':  {0b01110, 0b10001, 0b00001, 0b00010, 0b00100, 0, 0b00100},
	'a':  {0, 0, 0b01110, 0b00001, 0b01111, 0b10001, 0b01111},
	'b':  {0b10000, 0b10000, 0b10110, 0b11001, 0b10001, 0b10001, 0b11110},
	'c':  {0, 0, 0b01110, 0b10000, 0b10000, 0b10001, 0b01110},
	'd':  {0b00001, 0b00001, 0b01101, 0b10011, 0b10001, 0b10001, 0b01111},
	'e':  {0, 0, 0b01110, 0b10001, 0b11111, 0b10000, 0b01110},
	'f':  {0b00110, 0b01001, 0b01000, 0b11100, 0b01000, 0b01000, 0b01000},
	'g':  {0, 0b01111, 0b10001, 0b10001, 0b01111, 0b00001, 0b01110},
	'h':  {0b10000, 0b10000, 0b10110, 0b11001, 0b10001, 0b10001, 0b10001},
	'i':  {0b00100, 0, 0b01100, 0b00100, 0b00100, 0b00100, 0b01110},
	'j':  {0b00010, 0, 0b00110, 0b00010, 0b00010, 0b10010, 0b01100},
	'k':  {0b10000, 0b10000, 0b10010, 0b10100, 0b11000, 0b10100, 0b10010},
	'l':  {0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110},
	'm':  {0, 0, 0b11010, 0b10101, 0b10101, 0b10001, 0b10001},
	'n':  {0, 0, 0b10110, 0b11001, 0b10001, 0b10001, 0b10001},
	'o':  {0, 0, 0b01110, 0b10001, 0b10001, 0b10001, 0b01110},
	'p':  {0, 0, 0b11110, 0b10001, 0b11110, 0b10000, 0b10000},
	'q':  {0, 0, 0b01101, 0b10011, 0b01111, 0b00001, 0b00001},
	'r':  {0, 0, 0b10110, 0b11001, 0b10000, 0b10000, 0b10000},
	's':  {0, 0, 0b01110, 0b10000, 0b01110, 0b00001, 0b11110},
	't':  {0b01000, 0b01000, 0b11100, 0b01000, 0b01000, 0b01001, 0b00110},
	'u':  {0, 0, 0b10001, 0b10001, 0b10001, 0b10011, 0b01101},
	'v':  {0, 0, 0b10001, 0b10001, 0b10001, 0b01010, 0b00100},
	'w':  {0, 0, 0b10001, 0b10001, 0b10101, 0b10101, 0b01010},
	'x':  {0, 0, 0b10001, 0b01010, 0b00100, 0b01010, 0b10001},
	'y':  {0, 0, 0b10001, 0b10001, 0b01111, 0b00001, 0b01110},
	'z':  {0, 0, 0b11111, 0b00010, 0b00100, 0b01000, 0b11111},
	'×':  {0, 0b10001, 0b01010, 0b00100, 0b01010, 0b10001, 0},
	'µ':  {0, 0, 0b10001, 0b10001, 0b10011, 0b11101, 0b10000},
	'·':  {0, 0, 0, 0b01100, 0b01100, 0, 0},
	'²':  {0b01100, 0b10010, 0b00100, 0b01000, 0b11110, 0, 0},
	'−':  {0, 0, 0, 0b11111, 0, 0, 0},
	'≥':  {0b01000, 0b00100, 0b00010, 0b00100, 0b01000, 0, 0b11111},
	'≤':  {0b00010, 0b00100, 0b01000, 0b00100, 0b00010, 0, 0b11111},
}
