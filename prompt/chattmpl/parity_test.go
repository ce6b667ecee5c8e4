package chattmpl

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/valyala/fastjson"
)

// tokenizersDir is where `make tokenizers` puts the real tokenizer files
// (out/tokenizers at the module root); KVROUTE_TOKENIZERS overrides it.
func tokenizersDir() string {
	if d := os.Getenv("KVROUTE_TOKENIZERS"); d != "" {
		return d
	}
	return filepath.Join("..", "..", "out", "tokenizers")
}

// parityTemplates are the real templates the parity test renders.
var parityTemplates = []string{"qwen3", "llama3", "deepseek_v3", "gemma3"}

// needConfig returns the path of NAME's tokenizer_config.json, skipping the
// test when it was not fetched, or failing it under CI.
func needConfig(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(tokenizersDir(), name, "tokenizer_config.json")
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing: run `make tokenizers` first (CI must fetch the tokenizer files): %v", p, err)
		}
		t.Skipf("%s is missing: run `make tokenizers` to fetch the real tokenizer configs", p)
	}
	return p
}

type goldenResult struct {
	Output *string `json:"output"`
	Error  *string `json:"error"`
}

type golden struct {
	Template       string `json:"template"`
	ContentFormat  string `json:"content_format"`
	TemplateSHA256 string `json:"template_sha256"`
	Renderer       string `json:"renderer"`
	Cases          map[string]struct {
		Raw  goldenResult `json:"raw"`
		VLLM goldenResult `json:"vllm"`
	} `json:"cases"`
}

type conversation struct {
	Name string          `json:"name"`
	Raw  json.RawMessage `json:"-"`
}

// loadCorpus returns each conversation of testdata/conversations.json as
// its name and JSON (a /v1/chat/completions body).
func loadCorpus(t testing.TB) (names []string, bodies map[string][]byte) {
	t.Helper()
	data, err := os.ReadFile("testdata/conversations.json")
	if err != nil {
		t.Fatal(err)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	bodies = map[string][]byte{}
	for _, r := range raw {
		var c conversation
		if err := json.Unmarshal(r, &c); err != nil {
			t.Fatal(err)
		}
		names = append(names, c.Name)
		bodies[c.Name] = r
	}
	return names, bodies
}

// TestParity renders every conversation of the corpus with every real
// template and compares with the reference renderer's strings
// (testdata/golden, made by testdata/ref/render.mjs with @huggingface/jinja):
// "raw" renders the messages as sent, "vllm" after Messages' normalization.
// A case the reference fails must fail here too.
func TestParity(t *testing.T) {
	names, bodies := loadCorpus(t)
	for _, tn := range parityTemplates {
		t.Run(tn, func(t *testing.T) {
			path := needConfig(t, tn)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			gdata, err := os.ReadFile(filepath.Join("testdata", "golden", tn+".json"))
			if err != nil {
				t.Fatal(err)
			}
			var g golden
			if err := json.Unmarshal(gdata, &g); err != nil {
				t.Fatal(err)
			}
			src := fastjson.MustParseBytes(data).GetStringBytes("chat_template")
			sum := sha256.Sum256(src)
			if hex.EncodeToString(sum[:]) != g.TemplateSHA256 {
				t.Fatalf("%s's chat_template is not the one the goldens were made from (sha256 %x, golden %s): re-run testdata/ref/render.mjs", path, sum, g.TemplateSHA256)
			}
			tmpl, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if tmpl.ContentFormat().String() != g.ContentFormat {
				t.Errorf("content format %v, reference %s", tmpl.ContentFormat(), g.ContentFormat)
			}
			var checked int
			for _, name := range names {
				want, ok := g.Cases[name]
				if !ok {
					t.Errorf("%s: no golden (re-run testdata/ref/render.mjs)", name)
					continue
				}
				body := fastjson.MustParseBytes(bodies[name])
				// raw: the messages as sent.
				vars := Vars{Messages: FromJSON(body.Get("messages")), AddGenerationPrompt: body.GetBool("add_generation_prompt"),
					Extra: FromJSON(body.Get("chat_template_kwargs"))}
				if tl := body.Get("tools"); tl != nil {
					vars.Tools = FromJSON(tl)
				}
				got, err := tmpl.Render(nil, vars)
				compare(t, name+"/raw", got, err, want.Raw)
				got, err = tmpl.RenderRequest(nil, body)
				compare(t, name+"/vllm", got, err, want.VLLM)
				checked += 2
			}
			t.Logf("%s: %d renders identical to %s", tn, checked, g.Renderer)
		})
	}
}

func compare(t *testing.T, name string, got []byte, err error, want goldenResult) {
	t.Helper()
	switch {
	case want.Error != nil && err == nil:
		t.Errorf("%s: rendered %q, the reference fails: %s", name, got, *want.Error)
	case want.Error == nil && err != nil:
		t.Errorf("%s: %v, the reference renders %q", name, err, *want.Output)
	case want.Output != nil && string(got) != *want.Output:
		t.Errorf("%s:\n got %q\nwant %q", name, got, *want.Output)
	case want.Error != nil && err.Error() != *want.Error:
		// Both fail: the message may differ in wording, but say so.
		t.Logf("%s: both fail; here %q, reference %q", name, err, *want.Error)
	}
}
