-- Argo CD health check for gpu-acceptance.io/AcceptanceTest
-- (argocd-cm key: resource.customizations.health.gpu-acceptance.io_AcceptanceTest; see docs/argocd.md).
-- Written for Lua 5.1 (Argo CD's gopher-lua): no goto, no integer division, no bit operators.
-- Progressing until the operator has judged the current spec, Healthy when it passed, Degraded with the operator's
-- reason when it failed. Argo CD fails a PostSync hook on Degraded or Unknown, so an unknown phase is Unknown.
local hs = {}

local function condition(status, wanted)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == wanted then
      return c
    end
  end
  return nil
end

if obj.status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the gpu-acceptance operator to pick the test up"
  return hs
end

local status = obj.status
local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to start a run for generation " .. tostring(generation)
  return hs
end

local succeeded = condition(status, "Succeeded")
local phase = status.phase

if phase == nil or phase == "Pending" or phase == "Running" then
  hs.status = "Progressing"
  if succeeded ~= nil and succeeded.message ~= nil and succeeded.message ~= "" then
    hs.message = succeeded.message
  elseif phase == nil then
    hs.message = "Waiting for the operator to set a phase"
  else
    hs.message = phase
  end
  return hs
end

if phase == "Succeeded" then
  hs.status = "Healthy"
  if succeeded ~= nil and succeeded.message ~= nil and succeeded.message ~= "" then
    hs.message = succeeded.message
  else
    hs.message = "Acceptance test passed"
  end
  return hs
end

if phase == "Failed" then
  hs.status = "Degraded"
  if succeeded ~= nil and succeeded.message ~= nil and succeeded.message ~= "" then
    if succeeded.reason ~= nil and succeeded.reason ~= "" then
      hs.message = succeeded.reason .. ": " .. succeeded.message
    else
      hs.message = succeeded.message
    end
  else
    hs.message = "Acceptance test failed (no Succeeded condition in its status; see kubectl describe)"
  end
  return hs
end

hs.status = "Unknown"
hs.message = "Unknown phase " .. tostring(phase)
return hs
