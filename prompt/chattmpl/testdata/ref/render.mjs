// Renders every (template, conversation) pair of prompt/chattmpl's parity test
// with the reference Jinja renderer, @huggingface/jinja, into golden strings.
//
//   make tokenizers                       # fetches the tokenizer configs
//   cd prompt/chattmpl/testdata/ref && npm ci && node render.mjs [TOKDIR]
//
// TOKDIR (default ../../../../out/tokenizers) holds NAME/tokenizer_config.json.
// Writes ../golden/NAME.json: the template's sha256 (the Go test checks the
// fetched file is the one the goldens were made from) and, per conversation,
// {"output": "..."} or {"error": "..."}.
//
// Variables are those transformers' apply_chat_template passes: messages,
// tools (null when absent), documents (null), add_generation_prompt, the
// tokenizer config's special tokens (AddedToken objects as their content)
// and the request's chat_template_kwargs.
//
// Each case is rendered twice: "raw", the messages as the request sent them
// (transformers' semantics), and "vllm", the messages as vLLM's
// parse_chat_messages hands them to the template (normalize below, restated
// from vllm/entrypoints/chat_utils.py; prompt/chattmpl's normalize.go is the
// same rules in Go).
import { Template } from "@huggingface/jinja";
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const tokdir = process.argv[2] ?? join(here, "../../../../out/tokenizers");
const names = ["qwen3", "llama3", "deepseek_v3", "gemma3"];
const specialKeys = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token", "additional_special_tokens"];
const cases = JSON.parse(readFileSync(join(here, "../conversations.json"), "utf8"));

// contentLoop marks an "openai"-format template: one that iterates over a
// message's content parts (vLLM detects the same on the Jinja AST).
const contentLoop = /\{%-?\s*for\s+\w+\s+in\s+[\w.\[\]'"]*(\[['"]content['"]\]|\.content)\s*-?%\}/;

const textTypes = { text: "text", input_text: "text", output_text: "text", thinking: "text", refusal: "refusal" };
const mediaTypes = { image_url: "image", input_image: "image", image_embeds: "image", image_pil: "image",
	audio_url: "audio", input_audio: "audio", audio_embeds: "audio", video_url: "video" };

function normalize(messages, format) {
	return messages.map((m, i) => {
		const out = { role: m.role };
		let parts = m.content;
		if (parts === null || parts === undefined) parts = [];
		else if (typeof parts === "string") parts = [parts];
		// [text or null, media type or null] per part, as vLLM parses them.
		const items = [];
		for (const p of parts) {
			if (typeof p === "string") {
				items.push([p, null]);
			} else if (textTypes[p.type]) {
				const t = p[textTypes[p.type]];
				if (t !== undefined && t !== null) items.push([t, null]);
			} else if (mediaTypes[p.type]) {
				items.push([null, mediaTypes[p.type]]);
			} else {
				throw new Error(`messages[${i}]: unknown part type ${p.type}`);
			}
		}
		if (format === "string") {
			out.content = items.filter(([t]) => t !== null).map(([t]) => t).join("\n");
		} else {
			out.content = items.map(([t, media]) => (media === null ? { type: "text", text: t } : { type: media }));
		}
		if (m.role === "assistant" && Array.isArray(m.tool_calls) && m.tool_calls.length > 0) {
			out.tool_calls = m.tool_calls.map((tc) => {
				const fn = { ...tc.function };
				let args = fn.arguments;
				if (typeof args === "string" && args !== "") {
					try {
						args = JSON.parse(args);
					} catch {
						args = {};
					}
				}
				fn.arguments = args !== null && typeof args === "object" && !Array.isArray(args) ? args : {};
				return { ...tc, function: fn };
			});
		}
		if (m.role === "tool" && m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id;
		if (typeof m.name === "string") out.name = m.name;
		if (m.role === "developer") out.tools = m.tools ?? null;
		const reasoning = m.reasoning ?? m.reasoning_content;
		if (reasoning !== undefined && reasoning !== null) {
			out.reasoning = reasoning;
			out.reasoning_content = reasoning;
		}
		return out;
	});
}

const tokenText = (v) => (Array.isArray(v) ? v.map(tokenText) : v !== null && typeof v === "object" ? v.content : v);

mkdirSync(join(here, "../golden"), { recursive: true });
for (const name of names) {
	const cfg = JSON.parse(readFileSync(join(tokdir, name, "tokenizer_config.json"), "utf8"));
	const src = cfg.chat_template;
	const tmpl = new Template(src);
	const special = {};
	for (const k of specialKeys) {
		if (cfg[k] !== undefined && cfg[k] !== null) special[k] = tokenText(cfg[k]);
	}
	const format = contentLoop.test(src) ? "openai" : "string";
	const out = {
		template: `${name}/tokenizer_config.json`,
		content_format: format,
		template_sha256: createHash("sha256").update(src).digest("hex"),
		renderer: "@huggingface/jinja " + JSON.parse(readFileSync(join(here, "node_modules/@huggingface/jinja/package.json"), "utf8")).version,
		cases: {},
	};
	const render = (messages, c) => {
		const vars = {
			...special,
			messages,
			tools: c.tools ? structuredClone(c.tools) : null,
			documents: null,
			add_generation_prompt: c.add_generation_prompt,
			...(c.chat_template_kwargs ?? {}),
		};
		try {
			return { output: tmpl.render(vars) };
		} catch (e) {
			return { error: String(e.message ?? e) };
		}
	};
	for (const c of cases) {
		out.cases[c.name] = {
			raw: render(structuredClone(c.messages), c),
			vllm: render(normalize(structuredClone(c.messages), format), c),
		};
	}
	writeFileSync(join(here, "../golden", `${name}.json`), JSON.stringify(out, null, 1) + "\n");
	const errs = (mode) => Object.values(out.cases).filter((x) => x[mode].error !== undefined).length;
	console.log(`${name} (${format}): ${cases.length} cases, render errors: raw ${errs("raw")}, vllm ${errs("vllm")}`);
}
