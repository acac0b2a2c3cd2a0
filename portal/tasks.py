from celery import shared_task

from portal.health import heartbeat_record


@shared_task(bind=True, ignore_result=True)
def heartbeat_task(self) -> None:
    heartbeat_record(worker=self.request.hostname or "unknown")
