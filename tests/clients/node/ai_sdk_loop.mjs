// A multi-step tool loop on the Vercel AI SDK (`ai` 6) with `@ai-sdk/openai-compatible`
// (Chat Completions): tools with `execute` functions, the SDK runs the loop
// (`stopWhen: stepCountIs(n)`).
//
// Usage: node ai_sdk_loop.mjs <base-url> <models> <mode> [max-steps]
//   (or TOOLCALL_BASE_URL, TOOLCALL_MODEL, TOOLCALL_MODE, TOOLCALL_MAX_STEPS)
// <models> is one model name or several separated by commas (one loop each, in order).
// Modes: generate (generateText), stream (streamText, consuming fullStream), stream-usage
// (streamText with the provider's `includeUsage: true`, so stream_options.include_usage).
// Prints one JSON object per model, one per line:
//   {final_text, steps, usage: [total tokens per step that reported usage],
//    executed: [{id, name, arguments}], error: null | {name, message, status?, code?}}
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';

import { runLoop } from './ai_sdk_common.mjs';
import { finish, parseArgs } from './common.mjs';

const { baseURL, model: models, mode, maxSteps } = parseArgs();
const provider = createOpenAICompatible({
  name: 'toolcall-proxy',
  baseURL,
  apiKey: 'sk-test',
  includeUsage: mode === 'stream-usage',
});

for (const model of models.split(',')) {
  finish(await runLoop(provider.chatModel(model), model, mode, maxSteps));
}
