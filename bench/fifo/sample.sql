INSERT INTO public.hsample SELECT clock_timestamp(), h.partition_key, h.head_id, h.parked_until, h.floor_id FROM outbox.partition_heads h WHERE h.head_id IS NULL;
