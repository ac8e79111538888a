-- Neovim init for the tests: loads the plugin from the working tree, records what the user would see
-- (notifications, suggestion events) in _G.codecue_test, and calls setup() with $CODECUE_SETUP (JSON).
local plugin_dir = assert(os.getenv('CODECUE_NVIM_PLUGIN'), 'CODECUE_NVIM_PLUGIN is not set')
vim.opt.runtimepath:prepend(plugin_dir)
vim.opt.swapfile = false
vim.opt.shortmess:append('I')

_G.codecue_test = { messages = {}, events = {} }

-- Stands in for a notification UI: keeps every message (a test asserts on what was said, and how often).
vim.notify = function(msg, level, _)
  table.insert(_G.codecue_test.messages, { msg = tostring(msg), level = level or vim.log.levels.INFO })
end

vim.api.nvim_create_autocmd('User', {
  pattern = 'CodeCueSuggestion',
  callback = function(args)
    local event = vim.deepcopy(args.data)
    -- What is drawn at this moment (listeners run after the plugin drew).
    event.drawn = require('codecue').visible_text(args.data.bufnr) or vim.NIL
    table.insert(_G.codecue_test.events, event)
  end,
})

local setup = vim.json.decode(os.getenv('CODECUE_SETUP') or '{}', { luanil = { object = true, array = true } })
require('codecue').setup(setup)
