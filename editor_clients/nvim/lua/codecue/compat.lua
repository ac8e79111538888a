--- The few calls whose form differs between Neovim 0.10, 0.11 and 0.12.
local M = {}

M.has_011 = vim.fn.has('nvim-0.11') == 1
M.has_012 = vim.fn.has('nvim-0.12') == 1

--- Is the built-in vim.lsp.inline_completion (Neovim 0.12+) available?
---@return boolean
function M.has_native_inline_completion()
  local ok, module = pcall(require, 'vim.lsp.inline_completion')
  return ok and type(module) == 'table' and type(module.enable) == 'function' and type(module.get) == 'function'
end

--- client:request on 0.11+, client.request on 0.10.
---@return boolean ok, integer|nil request_id
function M.request(client, method, params, handler, bufnr)
  if M.has_011 then
    return client:request(method, params, handler, bufnr)
  end
  return client.request(method, params, handler, bufnr)
end

--- client:notify on 0.11+, client.notify on 0.10.
---@return boolean sent
function M.notify(client, method, params)
  if M.has_011 then
    return client:notify(method, params)
  end
  return client.notify(method, params)
end

---@param client vim.lsp.Client
---@param id integer
function M.cancel(client, id)
  if M.has_011 then
    client:cancel_request(id)
  else
    client.cancel_request(id)
  end
end

---@param client vim.lsp.Client
---@param force boolean|nil
function M.stop(client, force)
  if M.has_011 then
    client:stop(force)
  else
    client.stop(force)
  end
end

---@param client vim.lsp.Client
---@return boolean
function M.is_stopped(client)
  if M.has_011 then
    return client:is_stopped()
  end
  return client.is_stopped()
end

--- Position params for the cursor in the current window.
---@param client vim.lsp.Client
---@return table
function M.position_params(client)
  return vim.lsp.util.make_position_params(0, client.offset_encoding)
end

return M
