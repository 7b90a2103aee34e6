// A multi-step tool loop on the Vercel AI SDK (`ai` 6) with `@ai-sdk/openai-compatible` (Chat
// Completions) or `@ai-sdk/anthropic` (Anthropic Messages): tools with `execute` functions, the
// SDK runs the loop (`stopWhen: stepCountIs(n)`).
//
// Usage: node ai_sdk_loop.mjs <base-url> <models> <mode> [max-steps]
//   (or TOOLCALL_BASE_URL, TOOLCALL_MODEL, TOOLCALL_MODE, TOOLCALL_MAX_STEPS)
// <models> is one model name or several separated by commas (one loop each, in order).
// Modes: generate (generateText), stream (streamText, consuming fullStream), stream-usage
// (streamText with the provider's `includeUsage: true`, so stream_options.include_usage);
// anthropic-generate and anthropic-stream: the same two on `@ai-sdk/anthropic`, whose base URL
// is the same `.../v1` (it posts to `/messages`).
// Prints one JSON object per model, one per line:
//   {final_text, steps, usage: [total tokens per step that reported usage],
//    executed: [{id, name, arguments}], error: null | {name, message, status?, code?}}
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';

import { runLoop } from './ai_sdk_common.mjs';
import { finish, parseArgs } from './common.mjs';

const { baseURL, model: models, mode: fullMode, maxSteps } = parseArgs();
const anthropic = fullMode.startsWith('anthropic-');
const mode = anthropic ? fullMode.slice('anthropic-'.length) : fullMode;
const languageModel = anthropic
  ? createAnthropic({ baseURL, apiKey: 'sk-test' })
  : createOpenAICompatible({
      name: 'toolcall-proxy',
      baseURL,
      apiKey: 'sk-test',
      includeUsage: mode === 'stream-usage',
    }).chatModel;
const client = anthropic ? 'ai-sdk-anthropic' : 'ai-sdk';
// Anthropic requires max_tokens; the SDK picks 4096 (with a warning) for unknown models.
const extra = anthropic ? { maxOutputTokens: 1024 } : {};

for (const model of models.split(',')) {
  finish(await runLoop(languageModel(model), model, mode, maxSteps, client, extra));
}
