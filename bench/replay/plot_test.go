package replay

import (
	"bytes"
	"image/color"
	"testing"
)

// textCanvas records the texts a figure draws.
type textCanvas struct{ texts []string }

func (c *textCanvas) polyline([]pt, color.RGBA, float64, bool)            {}
func (c *textCanvas) rect(float64, float64, float64, float64, color.RGBA) {}
func (c *textCanvas) text(_, _ float64, s string, _ float64, _ int, _ color.RGBA) {
	c.texts = append(c.texts, s)
}

// The PNG font draws lower case as lower case ("10ms", not "10MS"), and
// every rune the replay figure writes has a glyph of its own.
func TestPNGTextCase(t *testing.T) {
	render := func(s string) []byte {
		c := newPNGCanvas(60, 20)
		c.text(2, 15, s, 11, anchorStart, black)
		return c.img.Pix
	}
	if bytes.Equal(render("10ms"), render("10MS")) {
		t.Fatal(`"10ms" and "10MS" render the same pixels`)
	}
	for r := 'a'; r <= 'z'; r++ {
		if glyph(r) == glyph(r-'a'+'A') {
			t.Errorf("%q is drawn as %q", r, r-'a'+'A')
		}
	}
	rep, err := Run(head(t, sized(40, 20)), DefaultConfig(), Sweep{Policies: []Policy{mustPolicy(t, "kv"), mustPolicy(t, "round-robin")}, Speedups: []float64{1}})
	if err != nil {
		t.Fatal(err)
	}
	c := &textCanvas{}
	newFigure(rep, []float64{1}).draw(c)
	if len(c.texts) == 0 {
		t.Fatal("the figure drew no text")
	}
	for _, s := range c.texts {
		for _, r := range s {
			if _, ok := font5x7[r]; !ok {
				t.Errorf("%q in %q has no glyph (drawn as '?')", r, s)
			}
		}
	}
}
