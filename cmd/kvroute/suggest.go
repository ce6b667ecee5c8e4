package main

import "strings"

// editDistance is the Levenshtein distance between a and b (insertions,
// deletions and substitutions of bytes, each costing 1).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// closest returns the candidate nearest to name: one that name is a prefix
// of (the shortest), else the one at the smallest edit distance (the first
// of equals) when that distance is at most a third of the longer name plus
// one. ok is false when no candidate is that close.
func closest(name string, candidates []string) (best string, ok bool) {
	if name == "" {
		return "", false
	}
	for _, c := range candidates {
		if strings.HasPrefix(c, name) && (!ok || len(c) < len(best)) {
			best, ok = c, true
		}
	}
	if ok {
		return best, true
	}
	bestD := -1
	for _, c := range candidates {
		d := editDistance(name, c)
		if d <= max(len(name), len(c))/3+1 && (bestD < 0 || d < bestD) {
			best, bestD = c, d
		}
	}
	return best, bestD >= 0
}
