--- Engine for Neovim >= 0.12: final items go through the built-in vim.lsp.inline_completion (its
--- requests, its display, select and accept); CodeCue adds on top
---   * the partialCompletion stream drawn as growing ghost text until the final item arrives,
---   * answers that went stale while in flight are filtered before the built-in code shows them,
---   * a suggestion contradicted by typing is dismissed at once and its generation cancelled,
---   * accept line / accept word, through vim.lsp.inline_completion.get({ on_accept = ... }).
local api = vim.api
local ghost = require('codecue.ghost')
local stream = require('codecue.engine.stream')
local suggestion = require('codecue.suggestion')

local INLINE_COMPLETION = 'textDocument/inlineCompletion'

local M = { name = 'native' }

local augroup = api.nvim_create_augroup('codecue.native', { clear = true })

---@param item table lsp.InlineCompletionItem
---@return string
local function item_text(item)
  local text = item.insertText
  if type(text) == 'table' then
    text = text.value
  end
  return type(text) == 'string' and text or ''
end

--- Wrap the client's request method so inlineCompletion requests made by the built-in code are recorded
--- (their id, position and version, to match the stream) and their answers checked before display.
---@param client vim.lsp.Client
local function wrap_requests(client)
  if client._codecue_wrapped then
    return
  end
  client._codecue_wrapped = true
  local original = client.request
  client.request = function(self, method, params, handler, bufnr)
    if method ~= INLINE_COMPLETION or type(handler) ~= 'function' then
      return original(self, method, params, handler, bufnr)
    end
    local target = (bufnr == nil or bufnr == 0) and api.nvim_get_current_buf() or bufnr
    local row, col = suggestion.cursor(target)
    ---@type codecue.Request
    local request = {
      client_id = self.id,
      row = row or params.position.line,
      col = col or 0,
      position = params.position,
      version = vim.lsp.util.buf_versions[target],
      done = false,
    }
    local state = suggestion.get(target)
    local function on_answer(err, result, ctx)
      request.done = true
      -- A server may answer a request it was told to cancel; a dismissed suggestion stays dismissed.
      if request.cancelled then
        return handler(nil, nil, ctx)
      end
      if err or result == nil or not M.enabled then
        return handler(err, M.enabled and result or nil, ctx)
      end
      local kept, texts = {}, {}
      for _, item in ipairs(result.items or result) do
        local rest = suggestion.remainder(target, request, item_text(item))
        if rest and rest ~= '' then
          kept[#kept + 1] = item
          texts[#texts + 1] = item_text(item)
        end
      end
      -- The final answer replaces the streamed text (the built-in code draws it from here on).
      if state.request == request then
        state.stream = nil
        ghost.clear(target)
      end
      state.items, state.anchor, state.index = texts, { row = request.row, col = request.col }, 1
      suggestion.emit(target, 'final', texts[1] or '', true, request.id)
      return handler(err, { items = kept }, ctx)
    end
    local ok, id = original(self, method, params, on_answer, bufnr)
    if ok then
      request.id = id
      state.request = request
    end
    return ok, id
  end
end

--- Drop the built-in's current item (and its pending requests) without inserting anything.
---@param bufnr integer
local function dismiss_native(bufnr)
  local state = suggestion.get(bufnr)
  state.items = nil
  vim.lsp.inline_completion.get({ bufnr = bufnr, on_accept = function() end })
end

--- After the cursor moved or the text changed in insert mode.
---@param bufnr integer
local function on_edit(bufnr)
  local state = suggestion.get(bufnr)
  stream.cancel_if_stale(bufnr)
  local streaming = stream.refresh(bufnr)
  if state.items and state.anchor then
    local text = state.items[state.index] or state.items[1]
    local rest = text and suggestion.remainder(bufnr, state.anchor, text)
    local row = suggestion.cursor(bufnr)
    -- The built-in display skips typed characters only on the anchor's line.
    if not rest or rest == '' or row ~= state.anchor.row then
      -- Hide it now; get() below drops the built-in's state on its next tick.
      ghost.clear_native(bufnr)
      dismiss_native(bufnr)
      suggestion.emit(bufnr, 'clear', '')
    end
  end
  if streaming then
    ghost.clear_native(bufnr)
  end
end

M.enabled = true

---@param client vim.lsp.Client
---@param bufnr integer
function M.attach(client, bufnr)
  wrap_requests(client)
  if M.enabled then
    vim.lsp.inline_completion.enable(true, { bufnr = bufnr })
  end
  api.nvim_clear_autocmds({ group = augroup, buffer = bufnr })
  api.nvim_create_autocmd({ 'TextChangedI', 'CursorMovedI' }, {
    group = augroup,
    buffer = bufnr,
    -- Defined after the built-in's autocmds (enable() above created them), so this runs after its
    -- handler for the same event has redrawn the old item.
    callback = function()
      if M.enabled then
        on_edit(bufnr)
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
  ghost.clear(bufnr)
  suggestion.forget(bufnr)
end

---@param params table
function M.on_partial(params)
  if not M.enabled then
    return
  end
  stream.on_partial(params, ghost.clear_native, function(bufnr)
    local state = suggestion.get(bufnr)
    local text = state.items and state.anchor and state.items[state.index]
    return text and suggestion.remainder(bufnr, state.anchor, text) or nil
  end)
end

--- Accept all / a line / a word of the suggestion shown. Returns false when none is shown.
---@param bufnr integer
---@param kind 'all'|'line'|'word'
---@return boolean
function M.accept(bufnr, kind)
  if stream.accept(bufnr, kind) then
    -- Accepting mid-stream: the generation's later text is not wanted any more.
    stream.cancel(bufnr)
    dismiss_native(bufnr)
    return true
  end
  local state = suggestion.get(bufnr)
  local anchor = state.anchor
  return vim.lsp.inline_completion.get({
    bufnr = bufnr,
    on_accept = function(item)
      state.items = nil
      local text = item_text({ insertText = item.insert_text })
      local start = item.range and { row = item.range.start.row, col = item.range.start.col } or anchor
      local rest = start and suggestion.remainder(bufnr, start, text)
      if not rest or rest == '' then
        return
      end
      local part = suggestion.take(rest, kind)
      suggestion.insert(bufnr, part, kind)
      if #part < #rest then
        stream.carry_over(bufnr, rest:sub(#part + 1))
      end
    end,
  })
end

---@param bufnr integer
function M.dismiss(bufnr)
  local state = suggestion.get(bufnr)
  stream.cancel(bufnr)
  state.stream = nil
  ghost.clear(bufnr)
  dismiss_native(bufnr)
end

--- Show the next (count 1) or previous (count -1) alternative.
---@param bufnr integer
---@param count integer
---@return boolean
function M.cycle(bufnr, count)
  local state = suggestion.get(bufnr)
  if not state.items or #state.items < 2 or state.stream then
    return false
  end
  state.index = (state.index - 1 + count) % #state.items + 1
  vim.lsp.inline_completion.select({ bufnr = bufnr, count = count })
  return true
end

---@param enabled boolean
---@param buffers integer[]
function M.set_enabled(enabled, buffers)
  M.enabled = enabled
  for _, bufnr in ipairs(buffers) do
    if not enabled then
      M.dismiss(bufnr)
    end
    vim.lsp.inline_completion.enable(enabled, { bufnr = bufnr })
  end
end

return M
