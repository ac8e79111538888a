--- CodeCue for Neovim: inline completions (ghost text) from the local CodeCue language server.
---
---   require('codecue').setup({ ... })   -- see :help codecue
---
--- Public functions: accept(), accept_line(), accept_word(), dismiss(), next(), prev(), toggle(),
--- status(), stats(), restart(), visible_text(), statusline().
local api = vim.api
local compat = require('codecue.compat')
local config = require('codecue.config')
local cursor = require('codecue.cursor')
local ghost = require('codecue.ghost')
local server = require('codecue.server')
local suggestion = require('codecue.suggestion')

local M = {}

---@type table|nil the engine in use (codecue.engine.native or codecue.engine.extmark)
M.engine = nil
M.enabled = true
---@type table|nil last answer of codecue/stats
M.last_stats = nil

local augroup = api.nvim_create_augroup('codecue', { clear = true })

local function notify(message, level)
  vim.notify('CodeCue: ' .. message, level or vim.log.levels.INFO, { title = 'CodeCue' })
end

local function pick_engine(native)
  local has_native = compat.has_native_inline_completion()
  if native == true and not has_native then
    notify('native = true needs Neovim 0.12 (vim.lsp.inline_completion); using extmark ghost text', vim.log.levels.WARN)
  end
  if (native == 'auto' or native == true) and has_native then
    return require('codecue.engine.native')
  end
  return require('codecue.engine.extmark')
end

local function define_highlights()
  api.nvim_set_hl(0, 'CodeCueGhost', { link = 'Comment', default = true })
  api.nvim_set_hl(0, 'CodeCueHint', { link = 'NonText', default = true })
end

-- Insert-mode keys: each does its action when a suggestion is shown, else what the key did before.
local actions = {
  accept = function()
    return M.accept()
  end,
  accept_line = function()
    return M.accept_line()
  end,
  accept_word = function()
    return M.accept_word()
  end,
  next = function()
    return M.next()
  end,
  prev = function()
    return M.prev()
  end,
  dismiss = function()
    return M.dismiss()
  end,
}

local mapped = {} ---@type string[]

local function set_keymaps(keymaps)
  for _, lhs in ipairs(mapped) do
    pcall(vim.keymap.del, 'i', lhs)
  end
  mapped = {}
  for name, lhs in pairs(keymaps) do
    if lhs then
      local action = actions[name]
      vim.keymap.set('i', lhs, function()
        if not action() then
          api.nvim_feedkeys(api.nvim_replace_termcodes(lhs, true, false, true), 'n', false)
        end
      end, { desc = 'CodeCue: ' .. name:gsub('_', ' '), silent = true })
      mapped[#mapped + 1] = lhs
    end
  end
end

---@param opts table|nil see :help codecue-config
function M.setup(opts)
  local options, problems = config.resolve(opts)
  config.options = options
  for _, problem in ipairs(problems) do
    notify(problem, vim.log.levels.WARN)
  end
  define_highlights()
  ghost.set_hl_group(options.hl_group)
  M.engine = pick_engine(options.native)
  M.engine.debounce_ms = options.debounce_ms
  M.engine.enabled = M.enabled
  cursor.setup(options.cursor_moved)
  cursor.set_enabled(M.enabled)
  cursor.client_for = function(bufnr)
    local client = server.client()
    if client and server.wants(bufnr) and not compat.is_stopped(client) and vim.lsp.buf_is_attached(bufnr, client.id) then
      return client
    end
    return nil
  end
  server.on_attach = function(client, bufnr)
    if M.engine then
      M.engine.attach(client, bufnr)
    end
    -- A (re)started server knows no place yet: tell it where the cursor is.
    cursor.forget(bufnr)
    if bufnr == api.nvim_get_current_buf() then
      cursor.schedule()
    end
  end
  server.on_partial = function(params)
    if M.engine then
      M.engine.on_partial(params)
    end
  end
  set_keymaps(options.keymaps)

  api.nvim_clear_autocmds({ group = augroup })
  api.nvim_create_autocmd('FileType', {
    group = augroup,
    callback = function(args)
      if server.wants(args.buf) then
        server.attach(args.buf)
      end
    end,
  })
  api.nvim_create_autocmd('BufReadPre', {
    group = augroup,
    callback = function(args)
      server.start_early(args.buf)
    end,
  })
  api.nvim_create_autocmd({ 'InsertEnter', 'TextChangedI' }, {
    group = augroup,
    callback = function(args)
      if server.wants(args.buf) then
        server.retry_if_down()
      end
    end,
  })
  api.nvim_create_autocmd({ 'CursorMoved', 'CursorMovedI', 'BufEnter' }, {
    group = augroup,
    callback = function(args)
      if server.wants(args.buf) then
        cursor.schedule()
      else
        cursor.cancel()
      end
    end,
  })
  -- Entering insert mode asks for a completion here, which the server warms for anyway.
  api.nvim_create_autocmd('InsertEnter', { group = augroup, callback = cursor.cancel })
  api.nvim_create_autocmd('BufWipeout', {
    group = augroup,
    callback = function(args)
      cursor.forget(args.buf)
    end,
  })
  api.nvim_create_autocmd('ColorScheme', { group = augroup, callback = define_highlights })
  server.attach_all()
end

local function current_buffer()
  return api.nvim_get_current_buf()
end

---@param kind 'all'|'line'|'word'
---@return boolean accepted
local function accept(kind)
  if not M.engine or not M.enabled then
    return false
  end
  return M.engine.accept(current_buffer(), kind)
end

--- Accept the whole suggestion. Returns false when none is shown.
function M.accept()
  return accept('all')
end

--- Accept the suggestion up to the end of its current line.
function M.accept_line()
  return accept('line')
end

--- Accept the next word of the suggestion.
function M.accept_word()
  return accept('word')
end

--- Hide the suggestion and stop its generation. Returns false when none was shown.
function M.dismiss()
  local bufnr = current_buffer()
  local shown = ghost.visible(bufnr) ~= nil
  if M.engine then
    M.engine.dismiss(bufnr)
  end
  return shown
end

--- Show the next alternative.
function M.next()
  return M.engine ~= nil and M.engine.cycle(current_buffer(), 1)
end

--- Show the previous alternative.
function M.prev()
  return M.engine ~= nil and M.engine.cycle(current_buffer(), -1)
end

--- The ghost text shown in the buffer (as drawn on screen), or nil.
---@param bufnr integer|nil
---@return string|nil
function M.visible_text(bufnr)
  return (ghost.visible(bufnr or current_buffer()))
end

--- Turn suggestions on or off (the server keeps running).
---@param enabled boolean|nil default: the opposite of now
function M.toggle(enabled)
  if enabled == nil then
    enabled = not M.enabled
  end
  M.enabled = enabled
  cursor.set_enabled(enabled)
  if M.engine then
    M.engine.set_enabled(enabled, server.wanted_buffers())
  end
  notify(enabled and 'suggestions on' or 'suggestions off')
end

--- One line per language: completions, acceptance, speed.
---@param stats table codecue/stats result
---@return string[]
function M.format_stats(stats)
  local lines = {}
  local function row(name, s)
    if type(s) ~= 'table' then
      return
    end
    lines[#lines + 1] = ('%-12s %4d completions, acceptance %3.0f%%, %6.1f tokens/s, TTFT %.0f ms, TPOT %.1f ms, speculation %s'):format(
      name,
      tonumber(s.completions) or 0,
      (tonumber(s.acceptanceRate) or 0) * 100,
      tonumber(s.tokensPerSecond) or 0,
      tonumber(s.ttftMs) or 0,
      tonumber(s.tpotMs) or 0,
      s.speculation and 'on' or 'off'
    )
  end
  local languages = type(stats.languages) == 'table' and stats.languages or {}
  local names = vim.tbl_keys(languages)
  table.sort(names)
  for _, name in ipairs(names) do
    row(name, languages[name])
  end
  row('total', stats.total)
  if #lines == 0 then
    lines[1] = 'no completions yet'
  end
  return lines
end

--- Ask the server for this session's stats and show them. `callback(stats)` gets the raw result.
---@param callback fun(stats: table|nil, err: string|nil)|nil
function M.stats(callback)
  local client = server.client()
  if not client then
    local why = 'the server is not running' .. (server.last_error and (': ' .. server.last_error) or '')
    if callback then
      callback(nil, why)
    else
      notify(why, vim.log.levels.WARN)
    end
    return
  end
  compat.request(client, 'codecue/stats', {}, function(err, result)
    if err or type(result) ~= 'table' then
      local why = 'stats failed: ' .. (err and err.message or 'no result')
      if callback then
        callback(nil, why)
      else
        notify(why, vim.log.levels.WARN)
      end
      return
    end
    M.last_stats = result
    if callback then
      callback(result, nil)
    else
      notify('\n' .. table.concat(M.format_stats(result), '\n'))
    end
  end, current_buffer())
end

--- A short status for statuslines: "CodeCue 74% 112 tok/s", "CodeCue off", "CodeCue down".
---@return string
function M.statusline()
  if not M.enabled then
    return 'CodeCue off'
  end
  if server.state ~= 'running' then
    return 'CodeCue ' .. server.state
  end
  local total = M.last_stats and M.last_stats.total
  if type(total) == 'table' and (tonumber(total.completions) or 0) > 0 then
    return ('CodeCue %.0f%% %.0f tok/s'):format((total.acceptanceRate or 0) * 100, total.tokensPerSecond or 0)
  end
  return 'CodeCue'
end

--- Lines describing the client, the server and the engine.
---@return string[]
function M.status_lines()
  local client = server.client()
  local lines = {
    ('server: %s%s'):format(server.state, client and (' (client id %d)'):format(client.id) or ''),
    ('command: %s'):format(table.concat(config.options.cmd, ' ')),
    ('suggestions: %s, engine: %s'):format(M.enabled and 'on' or 'off', M.engine and M.engine.name or 'none'),
    ('filetypes: %s'):format(table.concat(config.options.filetypes, ', ')),
  }
  if server.last_error then
    lines[#lines + 1] = 'last error: ' .. server.last_error
  end
  if client then
    local buffers = vim.lsp.get_buffers_by_client_id(client.id)
    lines[#lines + 1] = ('attached buffers: %d'):format(#buffers)
  end
  return lines
end

function M.status()
  notify('\n' .. table.concat(M.status_lines(), '\n'))
end

function M.restart()
  server.restart()
end

--- :CodeCue {subcommand}
---@param args string
function M.command(args)
  local sub = vim.trim(args or '')
  if sub == '' or sub == 'status' then
    M.status()
  elseif sub == 'toggle' then
    M.toggle()
  elseif sub == 'enable' then
    M.toggle(true)
  elseif sub == 'disable' then
    M.toggle(false)
  elseif sub == 'stats' then
    M.stats()
  elseif sub == 'restart' then
    M.restart()
  else
    notify(('unknown subcommand %q (status, toggle, enable, disable, stats, restart)'):format(sub), vim.log.levels.ERROR)
  end
end

M.subcommands = { 'status', 'toggle', 'enable', 'disable', 'stats', 'restart' }

-- Expose for tests and statuslines.
M._server = server
M._suggestion = suggestion
M._cursor = cursor

return M
