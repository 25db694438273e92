"""The coordinator engine both backends share: the pure round and epoch model, its steps, the leader
loop, event dispatch and the node-side tracker."""
