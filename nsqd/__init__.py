"""nsqd: the NSQ broker (TCP protocol V2) on trio."""
