import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// The `vscode` module only exists inside the editor; tests get a small stand-in with the same shapes.
export default defineConfig({
  resolve: {
    alias: {
      vscode: fileURLToPath(new URL('./test/vscode-mock.ts', import.meta.url)),
    },
  },
  test: {
    include: ['test/**/*.test.ts'],
    environment: 'node',
  },
});
