-- Argo CD health of a gpuctl.dev GPUDriver (docs/gitops.md), from its status in the kstatus
-- convention: the coordinator's observedGeneration, then the Stalled, Degraded, Reconciling
-- and Ready conditions, and status.rollout for a rollout the admin paused.
--   Degraded    Stalled (Failed past the budget, rolled back, refused), or spec errors;
--   Suspended   paused by the admin (spec.rollout.pause);
--   Progressing not yet observed, a rollout moving or waiting for its moment, or not Ready yet;
--   Healthy     Ready, nothing in progress.
-- Install: examples/argocd/argocd-cm.yaml (generated from this file by hack/generate.py).
local hs = {}
local status = obj.status
if status == nil or status.observedGeneration == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for gpuctl-coordinator to observe the GPUDriver"
  return hs
end
local generation = obj.metadata.generation
if generation ~= nil and status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = string.format("Waiting for gpuctl-coordinator to observe generation %d", generation)
  return hs
end
local conditions = {}
if status.conditions ~= nil then
  for _, condition in ipairs(status.conditions) do
    conditions[condition.type] = condition
  end
end
local function holds(kind)
  local condition = conditions[kind]
  return condition ~= nil and condition.status == "True"
    and (condition.observedGeneration == nil or generation == nil
      or condition.observedGeneration >= generation)
end
local function said(kind, otherwise)
  local condition = conditions[kind]
  if condition ~= nil and condition.message ~= nil and condition.message ~= "" then
    return condition.message
  end
  return otherwise
end
local rollout = status.rollout or {}
if holds("Stalled") then
  hs.status = "Degraded"
  hs.message = said("Stalled", "the rollout needs an admin")
  return hs
end
if holds("Degraded") then
  hs.status = "Degraded"
  hs.message = said("Degraded", "the GPUDriver has errors")
  return hs
end
if rollout.state == "Paused" and rollout.holdKind == "Paused" then
  hs.status = "Suspended"
  hs.message = rollout.message or "paused by spec.rollout.pause"
  return hs
end
if holds("Reconciling") then
  hs.status = "Progressing"
  hs.message = said("Reconciling", rollout.message or "rolling out")
  return hs
end
if holds("Ready") then
  hs.status = "Healthy"
  hs.message = rollout.message or said("Ready", "")
  return hs
end
if conditions["Ready"] ~= nil and conditions["Ready"].reason == "NoNodesTargeted" then
  hs.status = "Degraded"
  hs.message = said("Ready", "the GPUDriver targets no node")
  return hs
end
hs.status = "Progressing"
hs.message = said("Ready", "Waiting for the GPUDriver to be Ready")
return hs
