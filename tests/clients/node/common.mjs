// Shared by the client scripts: arguments, the two tools every client offers, the JSON result.
//
// The simulated upstream calls the first offered tool with its first declared property, and a
// second tool for parallel calls, so both scripts offer the same two tools in the same order.

export const userPrompt = 'Run the build steps.';

export const TOOL_SPECS = [
  {
    name: 'run_shell_command',
    description: 'Run a shell command',
    property: 'command',
    parameters: {
      type: 'object',
      properties: { command: { type: 'string' } },
      required: ['command'],
    },
  },
  {
    name: 'read_file',
    description: 'Read a file',
    property: 'path',
    parameters: {
      type: 'object',
      properties: { path: { type: 'string' } },
      required: ['path'],
    },
  },
];

export function parseArgs(argv = process.argv.slice(2), env = process.env) {
  const [baseURL = env.TOOLCALL_BASE_URL, model = env.TOOLCALL_MODEL, mode = env.TOOLCALL_MODE] =
    argv;
  const maxSteps = Number(argv[3] ?? env.TOOLCALL_MAX_STEPS ?? 8);
  if (!baseURL || !model || !mode || !Number.isInteger(maxSteps) || maxSteps < 1) {
    process.stderr.write('usage: <base-url> <model> <mode> [max-steps]\n');
    process.exit(2);
  }
  return { baseURL, model, mode, maxSteps };
}

export function finish(result) {
  result.error ??= null;
  process.stdout.write(`${JSON.stringify(result)}\n`);
}
