// The same multi-step tool loop on the Vercel AI SDK (`ai` 6) with `@ai-sdk/openai`'s
// Responses model, `openai.responses(model)`: `POST {base}/responses` with the whole history
// as `input` items every step.
//
// Usage: node ai_sdk_responses.mjs <base-url> <models> <mode> [max-steps]
// Modes: generate (generateText), stream (streamText, consuming fullStream).
// Prints one JSON object per model, one per line, as ai_sdk_loop.mjs does.
import { createOpenAI } from '@ai-sdk/openai';

import { runLoop } from './ai_sdk_common.mjs';
import { finish, parseArgs } from './common.mjs';

const { baseURL, model: models, mode, maxSteps } = parseArgs();
const openai = createOpenAI({ baseURL, apiKey: 'sk-test' });

for (const model of models.split(',')) {
  finish(await runLoop(openai.responses(model), model, mode, maxSteps));
}
