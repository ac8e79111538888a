--- Engine for Neovim 0.10 / 0.11 (and for `native = false`): CodeCue makes the textDocument/inlineCompletion
--- requests itself (debounced, the stale one cancelled) and draws the items as extmark ghost text.
local api = vim.api
local compat = require('codecue.compat')
local ghost = require('codecue.ghost')
local stream = require('codecue.engine.stream')
local suggestion = require('codecue.suggestion')

local INLINE_COMPLETION = 'textDocument/inlineCompletion'
local REQUEST_CANCELLED = -32800

local M = { name = 'extmark', enabled = true, debounce_ms = 150 }

local augroup = api.nvim_create_augroup('codecue.extmark', { clear = true })

---@type table<integer, uv.uv_timer_t>
local timers = {}

---@param item table
---@return string
local function item_text(item)
  local text = item.insertText
  if type(text) == 'table' then
    text = text.value
  end
  return type(text) == 'string' and text or ''
end

--- Draw the current item minus what was typed since its request; drop the items if that went stale.
---@param bufnr integer
---@return boolean drawn
local function draw_items(bufnr)
  local state = suggestion.get(bufnr)
  if not state.items or not state.anchor then
    return false
  end
  local text = state.items[state.index]
  local rest = text and suggestion.remainder(bufnr, state.anchor, text)
  local row, col = suggestion.cursor(bufnr)
  if not rest or rest == '' or not row then
    state.items = nil
    ghost.clear(bufnr)
    suggestion.emit(bufnr, 'clear', '')
    return false
  end
  local hint = #state.items > 1 and (' (%d/%d)'):format(state.index, #state.items) or nil
  ghost.show(bufnr, row, col, rest, hint)
  return true
end

---@param client_id integer
---@param bufnr integer
local function request(client_id, bufnr)
  local client = vim.lsp.get_client_by_id(client_id)
  if not client or compat.is_stopped(client) or api.nvim_get_current_buf() ~= bufnr then
    return
  end
  if not api.nvim_get_mode().mode:match('^i') then
    return
  end
  local state = suggestion.get(bufnr)
  stream.cancel(bufnr)
  local params = compat.position_params(client)
  params.context = { triggerKind = 2 } -- Automatic
  local row, col = suggestion.cursor(bufnr)
  ---@type codecue.Request
  local req = {
    client_id = client_id,
    row = row,
    col = col,
    position = params.position,
    version = vim.lsp.util.buf_versions[bufnr],
    done = false,
  }
  local ok, id = compat.request(client, INLINE_COMPLETION, params, function(err, result)
    req.done = true
    if req.cancelled or state.request ~= req or not M.enabled or not api.nvim_buf_is_valid(bufnr) then
      return
    end
    if err then
      if err.code ~= REQUEST_CANCELLED then
        vim.lsp.log.warn('codecue: inlineCompletion failed', err)
      end
      return
    end
    local texts = {}
    for _, item in ipairs(result and (result.items or result) or {}) do
      local text = item_text(item)
      local rest = suggestion.remainder(bufnr, req, text)
      if rest and rest ~= '' then
        texts[#texts + 1] = text
      end
    end
    state.stream = nil
    state.items, state.anchor, state.index = (#texts > 0 and texts or nil), { row = req.row, col = req.col }, 1
    if not draw_items(bufnr) then
      ghost.clear(bufnr)
    end
    suggestion.emit(bufnr, 'final', texts[1] or '', true, req.id)
  end, bufnr)
  if ok then
    req.id = id
    state.request = req
  end
end

---@param client_id integer
---@param bufnr integer
local function schedule_request(client_id, bufnr)
  local timer = timers[bufnr]
  if timer then
    timer:stop()
  else
    timer = assert(vim.uv.new_timer())
    timers[bufnr] = timer
  end
  timer:start(M.debounce_ms, 0, vim.schedule_wrap(function()
    if M.enabled then
      request(client_id, bufnr)
    end
  end))
end

---@param bufnr integer
local function on_edit(client_id, bufnr)
  stream.cancel_if_stale(bufnr)
  local streaming = stream.refresh(bufnr)
  if not streaming then
    draw_items(bufnr)
  end
  schedule_request(client_id, bufnr)
end

---@param client vim.lsp.Client
---@param bufnr integer
function M.attach(client, bufnr)
  local client_id = client.id
  api.nvim_clear_autocmds({ group = augroup, buffer = bufnr })
  api.nvim_create_autocmd({ 'InsertEnter', 'TextChangedI', 'CursorMovedI' }, {
    group = augroup,
    buffer = bufnr,
    callback = function()
      if M.enabled then
        on_edit(client_id, bufnr)
      end
    end,
  })
  api.nvim_create_autocmd('InsertLeave', {
    group = augroup,
    buffer = bufnr,
    callback = function()
      M.dismiss(bufnr)
    end,
  })
end

---@param bufnr integer
function M.detach(bufnr)
  api.nvim_clear_autocmds({ group = augroup, buffer = bufnr })
  local timer = timers[bufnr]
  if timer then
    timer:stop()
    timer:close()
    timers[bufnr] = nil
  end
  ghost.clear(bufnr)
  suggestion.forget(bufnr)
end

---@param params table
function M.on_partial(params)
  if M.enabled then
    stream.on_partial(params, nil, function(bufnr)
      local state = suggestion.get(bufnr)
      local text = state.items and state.anchor and state.items[state.index]
      return text and suggestion.remainder(bufnr, state.anchor, text) or nil
    end)
  end
end

---@param bufnr integer
---@param kind 'all'|'line'|'word'
---@return boolean
function M.accept(bufnr, kind)
  if stream.accept(bufnr, kind) then
    stream.cancel(bufnr)
    return true
  end
  local state = suggestion.get(bufnr)
  if not state.items or not state.anchor then
    return false
  end
  local rest = suggestion.remainder(bufnr, state.anchor, state.items[state.index])
  if not rest or rest == '' then
    return false
  end
  local part = suggestion.take(rest, kind)
  suggestion.insert(bufnr, part, kind)
  -- The items stay: what was inserted matches them, so the rest is still drawn (type-through).
  draw_items(bufnr)
  return true
end

---@param bufnr integer
function M.dismiss(bufnr)
  local state = suggestion.get(bufnr)
  local timer = timers[bufnr]
  if timer then
    timer:stop()
  end
  stream.cancel(bufnr)
  state.stream, state.items = nil, nil
  ghost.clear(bufnr)
end

---@param bufnr integer
---@param count integer
---@return boolean
function M.cycle(bufnr, count)
  local state = suggestion.get(bufnr)
  if not state.items or #state.items < 2 or state.stream then
    return false
  end
  state.index = (state.index - 1 + count) % #state.items + 1
  return draw_items(bufnr)
end

---@param enabled boolean
---@param buffers integer[]
function M.set_enabled(enabled, buffers)
  M.enabled = enabled
  if not enabled then
    for _, bufnr in ipairs(buffers) do
      M.dismiss(bufnr)
    end
  end
end

return M
