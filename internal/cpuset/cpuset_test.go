package cpuset

import (
	"errors"
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
	}{
		{"", nil},
		{"  ", nil},
		{"0", []int{0}},
		{"0-3,8", []int{0, 1, 2, 3, 8}},
		{" 8 , 0-1 ,1", []int{0, 1, 8}},
		{"10-11,2-2", []int{2, 10, 11}},
		{"1023", []int{1023}},
	} {
		got, err := Parse(tc.in)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.in, err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("Parse(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{"a", "1-", "-1", "3-1", "1,,2", "1024", "0-1024", "+1", "1-2-3", "1.5"} {
		if got, err := Parse(in); !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) = %v, %v; want ErrSyntax", in, got, err)
		}
	}
}

func TestFormatRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{3, 0, 1, 2, 8}, "0-3,8"},
		{[]int{5, 5, 7}, "5,7"},
		{[]int{1, 2, 4, 5, 6, 9}, "1-2,4-6,9"},
	} {
		s := Format(tc.in)
		if s != tc.want {
			t.Errorf("Format(%v) = %q, want %q", tc.in, s, tc.want)
		}
		back, err := Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Compact(slices.Sorted(slices.Values(tc.in)))
		if !slices.Equal(back, want) && !(len(back) == 0 && len(want) == 0) {
			t.Errorf("Parse(Format(%v)) = %v", tc.in, back)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"0-3,8", "", "1,2,3", "7-7", Format([]int{0, 2, 3, 4, 9})} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cpus, err := Parse(s)
		if err != nil {
			return
		}
		if !slices.IsSorted(cpus) {
			t.Fatalf("Parse(%q) not sorted: %v", s, cpus)
		}
		back, err := Parse(Format(cpus))
		if err != nil || !slices.Equal(back, cpus) {
			t.Fatalf("round trip of %v: %v, %v", cpus, back, err)
		}
	})
}
