--- :checkhealth codecue
local M = {}

function M.check()
  local health = vim.health
  health.start('codecue')
  local compat = require('codecue.compat')
  local config = require('codecue.config')
  local codecue = require('codecue')
  if vim.fn.has('nvim-0.10') ~= 1 then
    health.error('Neovim 0.10 or later is required')
  elseif compat.has_native_inline_completion() then
    health.ok('Neovim has vim.lsp.inline_completion: final items use it, the stream is drawn on top')
  else
    health.ok('Neovim 0.10/0.11: CodeCue draws its own ghost text')
  end
  local cmd = config.options.cmd
  if vim.fn.executable(cmd[1]) == 1 then
    health.ok(('server command found: %s'):format(vim.fn.exepath(cmd[1])))
  else
    health.error(('server command %q not found'):format(cmd[1]), { 'pip install codecue, or set `cmd` in setup()' })
  end
  for _, line in ipairs(codecue.status_lines()) do
    health.info(line)
  end
end

return M
