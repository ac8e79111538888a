--- Options for require('codecue').setup(): defaults, validation, and the LSP initializationOptions
--- they translate to. Validated once, at setup; a bad option is reported and its default used.
local M = {}

---@class codecue.Keymaps
---@field accept string|false       accept the whole suggestion
---@field accept_line string|false  accept up to the end of the suggestion's current line
---@field accept_word string|false  accept the next word
---@field next string|false         show the next alternative
---@field prev string|false         show the previous alternative
---@field dismiss string|false      hide the suggestion (and cancel its generation)

---@class codecue.Config
M.defaults = {
  -- What editors spawn: connects to (or starts) the per-user daemon and relays LSP over stdio.
  cmd = { 'codecue', 'serve', '--stdio' },
  -- Extra environment for the server process.
  cmd_env = nil,
  -- Filetypes that get suggestions; the client attaches to buffers of these only.
  filetypes = {
    'python', 'lua', 'javascript', 'javascriptreact', 'typescript', 'typescriptreact',
    'go', 'rust', 'java', 'c', 'cpp', 'sh',
  },
  -- Model choice and generation options, sent as initializationOptions (nil = the server's default).
  model = { target = nil, draft = nil },
  max_tokens = nil,
  temperature = nil,
  -- Any further initializationOptions (camelCase, as the server documents them).
  init_options = {},
  -- 'auto': Neovim >= 0.12 uses the built-in vim.lsp.inline_completion for final items;
  -- false: always draw our own ghost text (the 0.10/0.11 path); true: require the built-in one.
  native = 'auto',
  -- Debounce before a request, in ms, for the extmark engine (the built-in one has its own).
  debounce_ms = 150,
  -- Send codecue/cursorMoved once the cursor has rested this long (outside insert mode), so the server
  -- warms its caches there before you type. `cursor_moved = false` turns it off.
  cursor_moved = { enabled = true, debounce_ms = 150 },
  ---@type codecue.Keymaps
  keymaps = {
    accept = '<M-l>',
    accept_line = '<M-j>',
    accept_word = '<M-w>',
    next = '<M-]>',
    prev = '<M-[>',
    dismiss = '<C-]>',
  },
  -- Restart after a crash: first delay, doubled each failed attempt up to max_delay_ms; after
  -- max_attempts failures the plugin waits for the next edit (or :CodeCue restart) to try again.
  restart = { delay_ms = 1000, max_delay_ms = 30000, max_attempts = 5 },
  -- Highlight group of the ghost text (linked to Comment unless you define it).
  hl_group = 'CodeCueGhost',
}

---@type codecue.Config
M.options = vim.deepcopy(M.defaults)

local function is_list_of_strings(value)
  if type(value) ~= 'table' or not vim.islist(value) then
    return false
  end
  for _, v in ipairs(value) do
    if type(v) ~= 'string' then
      return false
    end
  end
  return true
end

local function optional(kind)
  return function(v)
    return v == nil or type(v) == kind
  end
end

local function key_or_false(v)
  return v == false or type(v) == 'string'
end

local checks = {
  cmd = { function(v) return is_list_of_strings(v) and #v > 0 end, 'a non-empty list of strings' },
  cmd_env = { optional('table'), 'a table of environment variables' },
  filetypes = { is_list_of_strings, 'a list of filetype names' },
  model = { optional('table'), 'a table { target = ..., draft = ... }' },
  max_tokens = { function(v) return v == nil or (type(v) == 'number' and v >= 1) end, 'a positive number' },
  temperature = { function(v) return v == nil or (type(v) == 'number' and v >= 0) end, 'a number >= 0' },
  init_options = { optional('table'), 'a table' },
  native = { function(v) return v == 'auto' or type(v) == 'boolean' end, "'auto', true or false" },
  debounce_ms = { function(v) return type(v) == 'number' and v >= 0 end, 'a number >= 0' },
  cursor_moved = { function(v) return v == false or type(v) == 'table' end,
                   'false or a table { enabled = true|false, debounce_ms = number >= 0 }' },
  keymaps = { optional('table'), 'a table of keys (false disables one)' },
  restart = { optional('table'), 'a table { delay_ms, max_delay_ms, max_attempts }' },
  hl_group = { optional('string'), 'a highlight group name' },
}

--- Merge user options over the defaults. Returns the options and a list of problems (one line each).
---@param user table|nil
---@return codecue.Config, string[]
function M.resolve(user)
  local options = vim.deepcopy(M.defaults)
  local problems = {}
  for key, value in pairs(user or {}) do
    local check = checks[key]
    if not check then
      table.insert(problems, ('unknown option %q (ignored)'):format(key))
    elseif not check[1](value) then
      table.insert(problems, ('option %q must be %s; using the default'):format(key, check[2]))
    elseif key == 'cursor_moved' and value == false then
      options.cursor_moved.enabled = false
    elseif type(value) == 'table' and type(options[key]) == 'table' and not vim.islist(value) then
      options[key] = vim.tbl_deep_extend('force', options[key], value)
    else
      options[key] = value
    end
  end
  local cursor_moved = options.cursor_moved
  for name, value in pairs(cursor_moved) do
    local default = M.defaults.cursor_moved[name]
    if default == nil then
      table.insert(problems, ('unknown cursor_moved option %q (ignored)'):format(name))
      cursor_moved[name] = nil
    elseif name == 'enabled' and type(value) ~= 'boolean' then
      table.insert(problems, 'cursor_moved.enabled must be true or false; using the default')
      cursor_moved[name] = default
    elseif name == 'debounce_ms' and not (type(value) == 'number' and value >= 0) then
      table.insert(problems, 'cursor_moved.debounce_ms must be a number >= 0; using the default')
      cursor_moved[name] = default
    end
  end
  for name, lhs in pairs(options.keymaps) do
    if M.defaults.keymaps[name] == nil then
      table.insert(problems, ('unknown keymap %q (ignored)'):format(name))
      options.keymaps[name] = nil
    elseif not key_or_false(lhs) then
      table.insert(problems, ('keymap %q must be a key string or false; using the default'):format(name))
      options.keymaps[name] = M.defaults.keymaps[name]
    end
  end
  return options, problems
end

--- The initializationOptions sent to the server (camelCase keys, nils left out).
---@param options codecue.Config
---@return table|nil
function M.init_options(options)
  local init = vim.deepcopy(options.init_options or {})
  init.maxTokens = options.max_tokens or init.maxTokens
  init.temperature = options.temperature or init.temperature
  local model = options.model or {}
  if model.target or model.draft then
    init.model = vim.tbl_extend('force', init.model or {}, { target = model.target, draft = model.draft })
  end
  -- An empty table would be sent as a JSON array; leave the field out instead.
  if next(init) == nil then
    return nil
  end
  return init
end

return M
